"""A train-split sample bank serves the trainer exactly: `lemon eval`'s 5-voter sc-cot (and `gate`, which banks the
logprob scores) on the train split, then
every banked team scored through the trainer's own rollout under `workers.seeds: bank`, on an OFFLINE pool (a
request the bank lacks is an error). Workers are the scripted test double, seeded like a sampled model."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.benchmarks.extract import extract_number
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.pools import load_pool
from lemon.llm.scripted import ScriptedBackend
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.batch import group_worker_seed
from lemon.train.config import RewardConfig, load_train_config
from lemon.train.rollout import RolloutSettings, score_group
from lemon.train.tasks import TrainTask, load_train_tasks
from lemon.train.verified import bank_candidates, bank_targets, reliable_alone
from lemon.train.workers import worker_executor
from tests.evalcall import evaluate_kw
from tests.evaluation.test_cli import scripted_pool_yaml
from tests.pools import scripted_pool


def test_the_bank_mode_seed_is_evaluations_seed_0_whatever_the_run_seed() -> None:
    assert group_worker_seed(7, "svamp/x", 3, "bank", bank_seed=1234) == 1234
    assert group_worker_seed(7, "svamp/x", 3, "task", bank_seed=1234) != 1234


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
        targets, won = await bank_targets(tasks, executor, reward=RewardConfig())
    finally:
        await pool.aclose()
    assert sum(won.values()) == len(tasks) and len(targets) == len(tasks) - won.get("none right", 0)


def _voter_double(right_draws: set[int], scores: dict[str, float] | None = None) -> ScriptedBackend:
    """A sampled worker (test double): the k-th voter's draw (its seed) answers 4 (right) when k is in
    `right_draws`, else 7; replies score -5 (sure) or -80 by their answer, unless `scores` says otherwise."""
    seeds: dict[int, int] = {}

    def reply(request: ChatRequest) -> str:
        k = seeds.setdefault(request.params.seed or 0, len(seeds))
        return f"Working.\nThe answer is {4 if k in right_draws else 7}."

    def score(request: ChatRequest, text: str) -> float:
        return (scores or {}).get(text, -5.0 if "is 4" in text else -80.0)

    return ScriptedBackend("voter", responder=reply, scorer=score)


def _task() -> TrainTask:
    return TrainTask(id="toy/1", prompt="What is 2 + 2?", grade=lambda ans: extract_number(ans) == "4",
                     vote_key=extract_number, bank_seed=11)


async def _targets(double: ScriptedBackend) -> tuple[list[str], bool]:
    pool = scripted_pool(double, defaults=GenParams(temperature=0.7, max_tokens=64))
    executor = worker_executor(pool, RoleLibrary.load(), load_train_config())
    alone = await reliable_alone(executor, _task(), "large", RewardConfig())
    targets, _ = await bank_targets([_task()], executor, reward=RewardConfig())
    return [label for _, label, _ in targets], alone


async def test_one_agent_is_the_target_only_where_every_banked_draw_is_right() -> None:
    labels, alone = await _targets(_voter_double({0, 1, 2, 3, 4}))
    assert alone and labels == ["cot"]
    # voter 1 is right, but two of the five draws are not: one agent would be right by luck
    labels, alone = await _targets(_voter_double({0, 1, 3}))
    assert not alone and labels == ["gate"]  # voter 1 is sure (-5 >= the gate): one voter's tokens, a vote's safety


async def test_an_unsure_first_voter_makes_the_gate_run_on_to_agreement() -> None:
    unsure = {"Working.\nThe answer is 4.": -80.0}
    labels, _ = await _targets(_voter_double({0, 1, 3}, unsure))
    assert labels == ["agree-2-of-3"]  # the gate and esc both run 2 voters here; the 3-voter spec is shorter
