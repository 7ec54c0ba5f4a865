"""Group rollouts with a scripted pool: invalid specs, counterfactual spans, budgets, ablations."""

from __future__ import annotations

import random

import pytest

from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.render import FieldRef, render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.config import RewardConfig
from lemon.train.rollout import Ablation, RolloutSettings, field_room, rollout_group
from lemon.train.sampler import AdaptiveFamilySampler
from lemon.train.tasks import TrainTask
from tests.pools import LEVELS, pool_of

SPEC = Spec(agents=(
    Agent(name="solver", role="math_solver", duty="Solve it step by step", capacity="medium"),
    Agent(name="checker", role="critic", duty="Check the solver", capacity="large", depends_on=("solver",)),
), output="checker")


def _reply(req: ChatRequest) -> str:
    # The large model "knows" the answer unless its duty was reverted; everyone else answers 7.
    system = req.messages[0].content
    return "The answer is 42" if "Check the solver" in system else "The answer is 7"


def _executor() -> tuple[Executor, dict[str, ScriptedBackend]]:
    backends = {lv: ScriptedBackend(f"model-{lv}", responder=_reply) for lv in LEVELS}
    pool = pool_of(backends, defaults=GenParams(max_tokens=64))
    return Executor(pool, RoleLibrary.load()), backends


TASK = TrainTask(id="t/1", prompt="What is 6 * 7?", grade=lambda text: "42" in text)


async def _group(completions: list[str], *, cf: bool = True, budget: float | None = None,
                 ablation: Ablation | None = None, families: tuple[str, ...] = ("edge", "role", "capacity"),
                 seed: int = 0, discount: bool = False):
    ex, backends = _executor()
    sampler = AdaptiveFamilySampler(families, floor=0.1, seed=seed, discount=discount)
    settings = RolloutSettings(reward=RewardConfig(), cf_enabled=cf, cf_budget=budget,
                               ablation=ablation or Ablation())
    group = await rollout_group(ex, TASK, completions, roles=RoleLibrary.load(), settings=settings,
                                sampler=sampler, rng=random.Random(seed))
    return group, backends, sampler


async def test_invalid_spec_gets_penalty_and_no_counterfactual() -> None:
    text = render_spec(SPEC).text
    bad = "agents:\n  - name: x\n    role: nonexistent_role\n    capacity: small\n"
    group, _backends, _ = await _group([bad, "not yaml: [", text, text])
    invalid = group.samples[:2]
    for s in invalid:
        assert not s.valid and s.reward is not None
        assert s.reward.total == RewardConfig().invalid_penalty and not s.reward.allows_counterfactual
        assert s.cf is None and s.spent_tokens == 0 and s.calls == 0
    assert all(s.valid for s in group.samples[2:])
    assert group.samples[2].correct
    # The two identical valid specs share one node cache: the second costs nothing.
    assert sum(s.calls for s in group.samples) == 2


async def test_counterfactual_span_is_the_edited_field_in_the_completion() -> None:
    prefix = "Here is the team:\n"
    text = prefix + render_spec(SPEC).text
    for seed in range(6):
        group, _, sampler = await _group([text], seed=seed)
        s = group.samples[0]
        assert s.valid and s.canonical_at == len(prefix) and s.cf is not None
        value = text[s.cf.char_start:s.cf.char_end]
        ref = s.cf.field
        if ref.kind == "edge":
            assert value == ref.parent
        elif ref.kind == "duty":
            assert value == SPEC.agent(ref.agent).duty
            # reverting the checker's duty loses the answer: the original field was worth the success
            if ref.agent == "checker":
                assert s.cf.delta > 0.5
        else:
            assert value == SPEC.agent(ref.agent).capacity
        assert s.cf.delta == pytest.approx(s.total_reward - s.cf.edited_reward)
        assert s.cf.spent_tokens <= s.cf.estimated_tokens + 5
        assert sum(len(h) for h in sampler.state_dict()["history"].values()) == 1


async def test_no_cf_flag_and_budget_zero_run_no_reruns() -> None:
    text = render_spec(SPEC).text
    group, _backends, _ = await _group([text, text], cf=False)
    assert all(s.cf is None and s.cf_skip == "disabled" for s in group.samples)
    group, _, _ = await _group([text, text], budget=0.0)
    assert all(s.cf is None for s in group.samples)
    assert {s.cf_skip for s in group.samples} <= {"over budget", "no applicable edit"}


async def test_non_canonical_valid_spec_runs_but_gets_no_counterfactual() -> None:
    flow = ('{"agents": [{"name": "solver", "role": "math_solver", "duty": "Check the solver", '
            '"capacity": "large"}], "output": "solver"}')
    group, _, _ = await _group([flow])
    s = group.samples[0]
    assert s.valid and s.correct and s.cf is None and s.cf_skip == "not canonical"


async def test_ablations_rewrite_the_spec_and_disable_their_family() -> None:
    three = Spec(agents=(
        Agent(name="a", role="analyst", duty="List facts", capacity="large"),
        Agent(name="b", role="math_solver", duty="Solve", capacity="large", depends_on=("a",)),
        Agent(name="c", role="critic", duty="Check the solver", capacity="large", depends_on=("a",)),
    ), output="c")
    text = render_spec(three).text
    abl = Ablation(fixed_roles=True, fixed_capacity="small", fixed_structure="chain")
    group, _, _ = await _group([text], ablation=abl)
    s = group.samples[0]
    assert s.spec is not None
    assert [a.duty for a in s.spec.agents] == ["", "", ""]
    assert {a.capacity for a in s.spec.agents} == {"small"}
    assert [a.depends_on for a in s.spec.agents] == [(), ("a",), ("b",)] and s.spec.output == "c"
    assert s.cf is None and s.cf_skip == "no applicable live edit"  # every family is disabled
    assert Ablation(fixed_capacity="small").families(("edge", "role", "capacity")) == ("edge", "role")
    # only the edge family requested: the counterfactual is always an edge deletion
    for seed in range(4):
        group, _, _ = await _group([render_spec(SPEC).text], families=("edge",), seed=seed)
        assert group.samples[0].cf is not None and group.samples[0].cf.family == "edge"


DEAD = Spec(agents=(
    Agent(name="solver", role="math_solver", duty="Solve it step by step", capacity="medium"),
    Agent(name="critic", role="critic", duty="Check the solver", capacity="large", depends_on=("solver",)),
), output="solver")


@pytest.mark.parametrize("seed", range(12))
async def test_counterfactuals_never_edit_a_dead_agent(seed: int) -> None:
    """Review item 4: the critic nothing depends on is pruned, so editing it measures nothing."""
    text = render_spec(DEAD).text
    group, _, _ = await _group([text] * 3, seed=seed)
    for s in group.samples:
        assert s.cf is not None, s.cf_skip
        assert s.cf.field.agent == "solver"


async def test_a_spec_with_only_dead_fields_is_skipped_for_that_reason() -> None:
    only_dead = Spec(agents=(
        Agent(name="solver", role="math_solver", duty="", capacity="small"),
        Agent(name="critic", role="critic", duty="Check", capacity="large", depends_on=("solver",)),
    ), output="solver")
    group, _, _ = await _group([render_spec(only_dead).text])
    assert group.samples[0].cf is None and group.samples[0].cf_skip == "no applicable live edit"


async def test_workers_run_at_the_evaluation_temperature() -> None:
    """Review item 3: training rollouts sample workers as `lemon eval` does (0.7, the pool's max_tokens)."""
    from lemon.evaluation.item import DEFAULT_TEMPERATURE
    from lemon.train.config import TrainConfig
    from lemon.train.workers import worker_executor

    cfg = TrainConfig()
    assert cfg.workers.temperature == DEFAULT_TEMPERATURE
    ex, backends = _executor()
    trained = worker_executor(ex.pool, RoleLibrary.load(), cfg)
    await trained.run(SPEC, TASK.prompt, seed=3)
    temps = {req.params.temperature for b in backends.values() for req in b.calls}
    assert temps == {DEFAULT_TEMPERATURE}


async def test_worker_samples_average_success_over_seeds() -> None:
    """`workers.samples` = K runs of each spec under K worker seeds; success is their mean."""
    def coin(req: ChatRequest) -> str:
        return "The answer is 42" if (req.params.seed or 0) % 2 else "The answer is 7"

    backends = {lv: ScriptedBackend(f"model-{lv}", responder=coin) for lv in LEVELS}
    pool = pool_of(backends, defaults=GenParams(max_tokens=64, temperature=0.7))
    ex = Executor(pool, RoleLibrary.load())
    one = Spec(agents=(Agent(name="solver", role="math_solver", duty="", capacity="large"),), output="solver")
    settings = RolloutSettings(reward=RewardConfig(), cf_enabled=False, worker_samples=8)
    group = await rollout_group(ex, TASK, [render_spec(one).text], roles=RoleLibrary.load(), settings=settings,
                                sampler=None, rng=random.Random(0), seed=11)
    s = group.samples[0]
    assert s.calls == 8 and 0.0 < s.success < 1.0
    assert s.reward is not None and s.reward.success == pytest.approx(s.success)


async def test_sampler_is_drawn_in_task_order_whatever_finishes_first() -> None:
    """Review item 7: with several tasks per step, plans (and sampler draws) follow task order, not the order
    in which groups finish executing, so a resumed run reproduces the uninterrupted one."""
    from lemon.train.rollout import rollout_groups

    def team(level: str) -> str:
        return render_spec(Spec(agents=(
            Agent(name="solver", role="math_solver", duty="Solve it", capacity=level),
            Agent(name="checker", role="critic", duty="Check the solver", capacity=level,
                  depends_on=("solver",)),
        ), output="checker")).text

    async def run(latency: dict[str, float]) -> list[tuple[str, object]]:
        backends = {lv: ScriptedBackend(f"model-{lv}", responder=_reply, latency_s=latency.get(lv, 0.0))
                    for lv in LEVELS}
        pool = pool_of(backends, defaults=GenParams(max_tokens=64))
        tasks = [TrainTask(id=f"t/{k}", prompt=f"What is 6 * 7? ({k})", grade=lambda t: "42" in t)
                 for k in range(2)]
        sampler = AdaptiveFamilySampler(("edge", "role", "capacity"), floor=0.3, seed=5)
        groups = await rollout_groups(Executor(pool, RoleLibrary.load()), tasks,
                                      [[team("large")] * 3, [team("medium")] * 3], roles=RoleLibrary.load(),
                                      settings=RolloutSettings(reward=RewardConfig()), sampler=sampler,
                                      rng=random.Random(1), seeds=[1, 2])
        return [(g.task_id, s.cf.field if s.cf else s.cf_skip) for g in groups for s in g.samples]

    large_slow = await run({"large": 0.05})
    medium_slow = await run({"medium": 0.05})
    assert large_slow == medium_slow


async def test_level_family_moves_capacity_up_or_down_and_credits_the_capacity_span() -> None:
    """`level` (ours): the edited capacity is another level of the pool, drawn among all of them."""
    targets = set()
    for seed in range(12):
        group, _, _ = await _group([render_spec(SPEC).text], families=("level",), seed=seed)
        s = group.samples[0]
        assert s.cf is not None and s.cf.family == "level" and s.cf.field.kind == "capacity"
        assert s.completion[s.cf.char_start:s.cf.char_end] == SPEC.agent(s.cf.field.agent).capacity
        assert s.cf.edited_value in LEVELS and s.cf.edited_value != SPEC.agent(s.cf.field.agent).capacity
        targets.add((s.cf.field.agent, s.cf.edited_reward))
    assert len(targets) > 1
    assert Ablation(fixed_capacity="small").families(("edge", "level")) == ("edge",)


VOTE = Spec(agents=(
    Agent(name="cot_1", role="math_solver", duty="", capacity="small"),
    Agent(name="cot_2", role="math_solver", duty="", capacity="small"),
    Agent(name="vote", role="majority_vote", duty="", capacity="small", depends_on=("cot_1", "cot_2")),
), output="vote")


@pytest.mark.parametrize("seed", range(12))
async def test_level_edits_never_touch_an_agent_that_calls_no_model(seed: int) -> None:
    """A majority vote's capacity changes no request: its Δ is 0 by construction and says nothing."""
    group, _, _ = await _group([render_spec(VOTE).text], families=("level",), seed=seed)
    s = group.samples[0]
    assert s.cf is not None, s.cf_skip
    assert s.cf.field.agent in {"cot_1", "cot_2"}


def test_field_room_is_the_share_of_the_group_choosing_otherwise() -> None:
    large = SPEC.model_copy(update={"agents": (SPEC.agents[0].model_copy(update={"capacity": "large"}),
                                               SPEC.agents[1])})
    lone = Spec(agents=(Agent(name="solver", role="math_solver", duty="", capacity="medium"),), output="solver")
    group = [SPEC, SPEC, large, lone]
    assert field_room(SPEC, FieldRef("capacity", "solver"), group) == pytest.approx(0.25)  # lone is medium too
    assert field_room(large, FieldRef("capacity", "solver"), group) == pytest.approx(0.75)
    assert field_room(SPEC, FieldRef("duty", "checker"), group) == pytest.approx(0.25)  # lone has no checker
    assert field_room(SPEC, FieldRef("edge", "checker", "solver"), group) == pytest.approx(0.25)
    assert field_room(SPEC, FieldRef("capacity", "solver"), [SPEC] * 4) == 0.0


async def test_counterfactuals_record_their_group_room() -> None:
    text = render_spec(SPEC).text
    group, _, sampler = await _group([text] * 4, budget=None)
    made = [s.cf for s in group.samples if s.cf is not None]
    assert made and all(cf.room == 0.0 for cf in made)  # four identical specs: every field is settled
    assert any(cf.delta != 0 for cf in made)
    assert sampler.probabilities() != pytest.approx(dict.fromkeys(sampler.families, 1 / 3))
    _, _, discounted = await _group([text] * 4, budget=None, discount=True)
    assert discounted.probabilities() == pytest.approx(dict.fromkeys(discounted.families, 1 / 3))


async def test_a_stop_rule_is_a_credited_field_and_removing_it_costs_the_skipped_voters() -> None:
    """Issue 24: the stop family edits the rule; Δ lands on the rule's span in the completion; removing the
    rule runs exactly the two voters it skipped (the rest are node-cache hits), which only costs tokens here
    (every voter answers 7, which is right), so Δ > 0: the rule earned its efficiency bonus."""
    voters = tuple(Agent(name=f"v{i}", role="math_solver", duty="Solve it step by step", capacity="large")
                   for i in range(4))
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(v.name for v in voters),
                 stop=StopRule(agree=2))
    text = render_spec(Spec(agents=(*voters, vote), output="vote")).text
    settings = RolloutSettings(reward=RewardConfig(), cf_enabled=True, cf_budget=None)
    task = TrainTask(id="t/7", prompt="What is 3 + 4?", grade=lambda out: "7" in out)
    removed = 0
    for seed in range(8):  # the family draws removal or a one-notch variant; every draw is checked
        sampled = GenParams(temperature=0.7, max_tokens=64)  # distinct requests per voter (at 0 they coincide)
        ex = Executor(pool_of({lv: ScriptedBackend(f"model-{lv}", responder=_reply) for lv in LEVELS},
                              defaults=sampled), RoleLibrary.load())
        group = await rollout_group(ex, task, [text], roles=RoleLibrary.load(), settings=settings,
                                    sampler=AdaptiveFamilySampler(("stop",), floor=0.1, seed=seed),
                                    rng=random.Random(seed))
        (s,) = group.samples
        assert s.cf is not None and s.cf.family == "stop" and s.cf.field == FieldRef("stop", "vote")
        assert text[s.cf.char_start:s.cf.char_end] == "{agree: 2}" and s.success == 1.0
        if not s.cf.edited_value:  # the rule removed: the two skipped voters run
            removed += 1
            assert s.cf.calls == 2 and s.cf.cache_hits == 2 and s.cf.delta > 0
    assert removed
