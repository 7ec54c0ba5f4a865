"""Group rollouts with a scripted pool: invalid specs, counterfactual spans, budgets, ablations."""

from __future__ import annotations

import random

import pytest

from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.pool import Level, Pool
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.spec.model import Agent, Spec
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.config import RewardConfig
from lemon.train.rollout import Ablation, RolloutSettings, rollout_group
from lemon.train.sampler import AdaptiveFamilySampler
from lemon.train.tasks import TrainTask

LEVELS = ("small", "medium", "large")
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
    pool = Pool("scripted", tuple(Level(lv, backends[lv], 4) for lv in LEVELS), GenParams(max_tokens=64))
    return Executor(pool, RoleLibrary.load()), backends


TASK = TrainTask(id="t/1", prompt="What is 6 * 7?", grade=lambda text: "42" in text)


async def _group(completions: list[str], *, cf: bool = True, budget: float | None = None,
                 ablation: Ablation | None = None, families: tuple[str, ...] = ("edge", "role", "capacity"),
                 seed: int = 0):
    ex, backends = _executor()
    sampler = AdaptiveFamilySampler(families, floor=0.1, seed=seed)
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
    assert s.cf is None and s.cf_skip == "no applicable edit"  # every family is disabled
    assert Ablation(fixed_capacity="small").families(("edge", "role", "capacity")) == ("edge", "role")
    # only the edge family requested: the counterfactual is always an edge deletion
    for seed in range(4):
        group, _, _ = await _group([render_spec(SPEC).text], families=("edge",), seed=seed)
        assert group.samples[0].cf is not None and group.samples[0].cf.family == "edge"
