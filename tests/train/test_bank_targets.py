"""A train-split sample bank serves the trainer exactly: `lemon eval`'s 5-voter sc-cot (and `gate`, which banks the
logprob scores) on the train split, then
every banked team scored through the trainer's own rollout under `workers.seeds: bank`, on an OFFLINE pool (a
request the bank lacks is an error). Workers are the scripted test double, seeded like a sampled model."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from lemon.evaluation.baselines import baseline_spec
from lemon.extract import extract_number
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.pools import load_pool
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.runtime.executor import derive_seed
from lemon.spec.model import Spec
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.batch import group_worker_seed
from lemon.train.budget_teacher import (
    PROGRAM_TEAMS,
    budget_candidates,
    most_accurate_within,
    orchestration_tokens,
    program_candidates,
)
from lemon.train.config import RewardConfig, WorkerConfig, load_train_config
from lemon.train.rollout import RolloutSettings, draw_orders, score_group
from lemon.train.tasks import TrainTask, load_train_tasks
from lemon.train.verified import (
    BANK_VOTERS,
    TeamOutcome,
    bank_candidates,
    bank_targets,
    benchmark_of,
    pooled_bank_targets,
)
from lemon.train.workers import worker_executor
from tests.evalcall import evaluate_kw
from tests.evaluation.test_cli import scripted_pool_yaml
from tests.pools import scripted_pool


def test_the_bank_mode_seed_is_evaluations_seed_0_whatever_the_run_seed() -> None:
    assert group_worker_seed(7, "svamp/x", 3, "bank", bank_seed=1234) == 1234
    assert group_worker_seed(7, "svamp/x", 3, "task", bank_seed=1234) != 1234


def test_bank_mode_worker_samples_are_orders_of_the_banked_draws_not_fresh_seeds() -> None:
    assert WorkerConfig(seeds="bank", samples=8).permute_draws() == 5
    assert WorkerConfig(seeds="bank", samples=1).permute_draws() == 0  # one sample: the written order
    assert WorkerConfig(seeds="task", samples=8).permute_draws() == 0
    orders = draw_orders(3, 8, 5)
    assert orders[0] == (0, 1, 2, 3, 4) and len(set(orders)) > 1 and all(sorted(o) == [0, 1, 2, 3, 4] for o in orders)


async def test_a_train_bank_answers_every_banked_team_of_the_trainer_offline(tmp_path: Path, data_dir: Path,
                                                                              monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    monkeypatch.setenv("LEMON_HOME", str(tmp_path / "home"))
    pool_file = str(scripted_pool_yaml(tmp_path / "pool.yaml", 0.0))
    await evaluate_kw("svamp", "sc-cot", split="train", limit=3, seeds=1, pool=pool_file, level="large",
                      n_agents=5, data_dir=data_dir, store=tmp_path / "s.sqlite")
    # the logprob gate's scores are banked by evaluating it (its samples are the bank's; only scoring is new)
    await evaluate_kw("svamp", "gate", split="train", limit=3, seeds=1, pool=pool_file, level="large",
                      data_dir=data_dir, store=tmp_path / "s.sqlite")
    _, tasks = load_train_tasks("svamp", limit=3, data_dir=data_dir)
    cfg = load_train_config()
    pool = load_pool(pool_file, offline=True)
    try:
        executor = worker_executor(pool, RoleLibrary.load(), cfg)
        texts = [render_spec(s).text for _, s in bank_candidates("number", executor.roles, "large")]
        for task in tasks:
            state = await score_group(executor, task, texts, roles=executor.roles, seed=task.bank_seed,
                                      settings=RolloutSettings(reward=cfg.reward, cf_enabled=False))
            for sample in state.result.samples:
                assert sample.valid and sample.status == "ok", (sample.status, sample.error)
                assert sample.spent_tokens == 0 and sample.total_tokens > 0  # all served by the bank
        # the written order only: the gate's scores are banked for the voters it ran in that order
        targets, won = await bank_targets(tasks, executor, reward=RewardConfig(), orders=1)
        for task in tasks:  # other orders of the banked voters are bank hits too (teams without the gate)
            state = await score_group(executor, task, texts[2:], roles=executor.roles, seed=task.bank_seed,
                                      settings=RolloutSettings(reward=cfg.reward, cf_enabled=False,
                                                               worker_samples=6, permute_draws=BANK_VOTERS))
            assert all(s.status == "ok" and s.spent_tokens == 0 for s in state.result.samples)
    finally:
        await pool.aclose()
    assert sum(won.values()) == len(tasks) and len(targets) == len(tasks) - won.get("none right", 0)


BANK_SEED = 11


def _voter_double(right_draws: set[int], scores: dict[str, float] | None = None,
                  program: str | None = None) -> ScriptedBackend:
    """A sampled worker (test double): the k-th banked draw (seed from slot `role#k`) answers 4 (right) when k
    is in `right_draws`, else 7; replies score -5 (sure) or -80 by their answer, unless `scores` says otherwise.
    A program agent (its system prompt asks for Python) gets `program`."""
    role = baseline_spec("cot", "number", level="large").agents[0].role
    draw_of = {derive_seed(BANK_SEED, f"{role}#{k}"): k for k in range(BANK_VOTERS)}

    def reply(request: ChatRequest) -> str:
        if program is not None and "Python" in request.messages[0].content:
            return program
        return f"Working.\nThe answer is {4 if draw_of[request.params.seed or 0] in right_draws else 7}."

    def score(request: ChatRequest, text: str) -> float:
        return (scores or {}).get(text, -5.0 if "is 4" in text else -80.0)

    return ScriptedBackend("voter", responder=reply, scorer=score)


def _task() -> TrainTask:
    return TrainTask(id="toy/1", prompt="What is 2 + 2?", grade=lambda ans: extract_number(ans) == "4",
                     vote_key=extract_number, bank_seed=BANK_SEED)


def _executor(double: ScriptedBackend) -> Executor:
    pool = scripted_pool(double, defaults=GenParams(temperature=0.7, max_tokens=64))
    return worker_executor(pool, RoleLibrary.load(), load_train_config())


async def _targets(double: ScriptedBackend, orders: int = 24) -> list[str]:
    targets, _ = await bank_targets([_task()], _executor(double), reward=RewardConfig(), orders=orders)
    return [label for _, label, _ in targets]


async def test_one_agent_is_the_target_where_every_banked_draw_is_right() -> None:
    assert await _targets(_voter_double({0, 1, 2, 3, 4})) == ["cot"]


async def test_a_lucky_first_draw_does_not_make_one_agent_the_target() -> None:
    # the bank's first draw is right, but two of the five are not: one agent is right on 3/5 of the draws
    assert await _targets(_voter_double({0, 1, 3}), orders=1) == ["cot"]  # one order: luck decides
    assert "cot" not in await _targets(_voter_double({0, 1, 3}))  # its expected success decides


async def test_permuted_draws_give_one_agent_the_share_of_orders_whose_first_draw_is_right() -> None:
    right = {0, 2}
    cot = render_spec(baseline_spec("cot", "number", level="large")).text
    state = await score_group(_executor(_voter_double(right)), _task(), [cot], roles=RoleLibrary.load(),
                              seed=BANK_SEED, settings=RolloutSettings(reward=RewardConfig(), cf_enabled=False,
                                                                       worker_samples=16,
                                                                       permute_draws=BANK_VOTERS))
    orders = draw_orders(BANK_SEED, 16, BANK_VOTERS)
    expected = sum(o[0] in right for o in orders) / len(orders)
    assert 0.0 < expected < 1.0 and state.result.samples[0].success == pytest.approx(expected)


async def test_no_team_ever_right_gives_no_example() -> None:
    assert await _targets(_voter_double(set())) == []


async def test_the_pooled_teacher_teaches_each_benchmark_one_team_the_best_on_average() -> None:
    # two tasks of one benchmark: on one every draw is right (one agent wins it alone), on the other 3 of 5 are
    # (a vote wins it by far); pooled, the vote is the better team for both, and is taught on both
    double = _voter_double({0, 1, 3})
    easy = TrainTask(id="toy/easy", prompt="What is 2 + 2?", grade=lambda ans: True, vote_key=extract_number,
                     bank_seed=BANK_SEED)
    hard = _task()
    per_task = [label for _, label, _ in (await bank_targets([easy, hard], _executor(double),
                                                             reward=RewardConfig()))[0]]
    pooled, won = await pooled_bank_targets([easy, hard], _executor(double), reward=RewardConfig())
    assert per_task[0] == "cot" and per_task[1] != "cot"
    labels = [label for _, label, _ in pooled]
    assert labels == [per_task[1]] * 2 and won == {per_task[1]: 2}
    assert benchmark_of(hard) == "toy"


async def test_the_pooled_teacher_chooses_on_the_first_tasks_and_teaches_every_task_unrun() -> None:
    """With `chosen_on` = K, only each benchmark's first K tasks are run (the banked ones); every later task of
    the benchmark is taught the choice without a worker call. The late task's seed is unknown to the double,
    so running it would fail the test."""
    double = _voter_double({0, 1, 3})
    easy = TrainTask(id="toy/easy", prompt="What is 2 + 2?", grade=lambda ans: True, vote_key=extract_number,
                     bank_seed=BANK_SEED)
    late = TrainTask(id="toy/late", prompt="What is 3 + 3?", grade=lambda ans: False, vote_key=extract_number,
                     bank_seed=999)  # never banked: the double has no draw for it
    other = TrainTask(id="other/1", prompt="What is 2 + 2?", grade=lambda ans: True, vote_key=extract_number,
                      bank_seed=BANK_SEED)
    executor = _executor(double)
    both, won = await pooled_bank_targets([easy, _task(), late, other], executor, reward=RewardConfig(),
                                          chosen_on=2)
    vote = both[0][1]
    assert vote != "cot" and [(t.id, label) for t, label, _ in both] == [
        ("toy/easy", vote), ("toy/1", vote), ("toy/late", vote), ("other/1", "cot")]  # other: its own choice
    assert won == {vote: 3, "cot": 1}
    first, _ = await pooled_bank_targets([easy, _task(), late], executor, reward=RewardConfig(), chosen_on=1)
    assert [label for _, label, _ in first] == ["cot"] * 3  # chosen on the easy task alone, taught on all
    with pytest.raises(ValueError, match="at least 1"):
        await pooled_bank_targets([easy], executor, reward=RewardConfig(), chosen_on=0)


def _outcomes(teams: list[tuple[str, Spec]], by_label: dict[str, tuple[float, float]]) -> list[TeamOutcome]:
    return [TeamOutcome(0.0, *by_label[label]) for label, _ in teams]


def test_the_budget_chooser_takes_the_most_accurate_team_under_the_share_orchestration_counted() -> None:
    """Synthetic outcomes (success, worker tokens) of four menu teams on one task; the 5-vote's 2,000 worker
    tokens set the budget. Each team also costs 70-115 orchestration tokens (prompt, framing, its own spec)."""
    teams = [t for t in budget_candidates("number", RoleLibrary.load(), "large")
             if t[0] in {"cot", "esc", "sc-cot-5", "gate-35"}]
    labels = [label for label, _ in teams]
    task = _task()
    overhead = {label: orchestration_tokens(task, spec) for label, spec in teams}
    assert all(60 < o < 140 for o in overhead.values())

    def choose(by_label: dict[str, tuple[float, float]], share: float) -> str:
        return labels[most_accurate_within(teams, [(task, _outcomes(teams, by_label))], share=share)]

    outcomes = {"cot": (0.6, 400.0), "esc": (0.9, 1100.0), "sc-cot-5": (0.9, 2000.0), "gate-35": (0.85, 700.0)}
    assert choose(outcomes, 0.5) == "gate-35"  # esc is more accurate but over 1,000 tokens
    assert choose(outcomes, 0.3) == "cot"  # only one agent fits under 600
    assert choose(outcomes, 0.2) == "cot"  # none fits under 400: the cheapest
    # a gate at 950 worker tokens fits under 1,000 only if its own orchestration tokens are not counted
    assert choose({**outcomes, "gate-35": (0.85, 950.0)}, 0.5) == "cot"


async def test_the_budget_teacher_teaches_a_gate_where_sure_replies_are_the_right_ones() -> None:
    """Through the bank: 3 of 5 draws right, each right reply sure (-5 nats) and each wrong one not (-80). A gate
    stops at the first right reply in every draw order, so it is right as often as the 5-vote at fewer
    tokens; one agent is right in 3 of 5 orders. The budget teacher teaches a gate, as its spec says."""
    double = _voter_double({0, 1, 3})
    choose = partial(most_accurate_within, share=1.0)
    targets, won = await pooled_bank_targets([_task()], _executor(double), reward=RewardConfig(),
                                             menu=budget_candidates, choose=choose)
    (_, label, spec), = targets
    assert label.startswith("gate") and won == {label: 1}
    stops = [a.stop for a in spec.agents if a.stop is not None]
    assert len(stops) == 1 and stops[0].logprob is not None and stops[0].logprob <= -5


async def test_the_programs_teacher_teaches_a_program_team_where_programs_are_right_and_cheap() -> None:
    """Through the bank, with the real sandbox: prose voters are right in 1 of 5 draws, every program voter
    writes a short program that prints the right answer. On the programs menu the budgeted teacher teaches a
    program team; on the prose menu it cannot (the test fails if the programs are not on the menu)."""
    double = _voter_double({0}, program="```python\nprint(2 + 2)\n```")
    choose = partial(most_accurate_within, share=0.5)
    taught = {}
    for menu in (program_candidates, budget_candidates):
        targets, _ = await pooled_bank_targets([_task()], _executor(double), reward=RewardConfig(), orders=4,
                                               menu=menu, choose=choose)
        (_, taught[menu], spec), = targets
        if menu is program_candidates:
            assert spec.agents[0].role == "program_solver"
    assert taught[program_candidates] in PROGRAM_TEAMS and taught[budget_candidates] not in PROGRAM_TEAMS
