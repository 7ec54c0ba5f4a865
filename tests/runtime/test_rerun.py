"""What a counterfactual re-run recomputes (one answer for the trainer and `lemon explain`), checked against
the calls a real re-run through the node cache makes."""

from __future__ import annotations

import itertools
import random

import pytest

from lemon.errors import SpecError
from lemon.llm.base import GenParams
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor, NodeCache
from lemon.runtime.rerun import rerun_agents, rerun_tokens
from lemon.spec.edits import FIELD_FAMILIES, applicable_edits, apply_edit, draw_edit
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.render import FieldRef
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from tests.pools import LEVELS, pool_of

ROLES = RoleLibrary.load()
SAMPLED = GenParams(temperature=0.7, max_tokens=32)


def team(voter: str = "v{}", rule: StopRule | None = StopRule(agree=2)) -> Spec:  # noqa: B008 (frozen)
    """A planner, 4 voters (named `voter`: `cot_{}` makes them a `copies` block), a vote (stopping under
    `rule`), a judge."""
    voters = tuple(Agent(name=voter.format(i), role="math_solver", duty="Think.", capacity="large")
                   for i in range(1, 5))
    plan = Agent(name="plan", role="planner", duty="Plan.", capacity="medium")
    judge = Agent(name="judge", role="critic", capacity="large", depends_on=("vote", "plan"))
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(v.name for v in voters),
                 stop=rule)
    return Spec(agents=(plan, *voters, vote, judge), output="judge")


@pytest.mark.parametrize("rule", [StopRule(agree=2), None])
@pytest.mark.parametrize("voter", ["v{}", "cot_{}"])
async def test_a_rerun_never_calls_an_agent_the_prediction_left_out(voter: str, rule: StopRule | None) -> None:
    """An upper bound (a budget must never undercount): an agent whose inputs happen to come out the same is
    a cache hit although predicted, e.g. the judge when deleting a voter leaves the vote's winner unchanged.
    With the voters as one `copies` block, an edit of the block's level changes all four, and growing the
    block adds a voter: both must be predicted."""
    spec = validate_spec(team(voter, rule), ROLES, LEVELS)
    for family in (*FIELD_FAMILIES, "level"):
        for ref, seed in itertools.product(applicable_edits(spec, family, LEVELS), range(3)):
            pool = pool_of({n: ScriptedBackend(f"m-{n}") for n in LEVELS}, concurrency=8)
            ex = Executor(pool, ROLES, node_cache=NodeCache(), params=SAMPLED)  # a seed per voter
            original = await ex.run(spec, "t")
            before = sum(len(lv.backend.calls) for lv in pool.levels)  # type: ignore[attr-defined]
            try:  # deleting the edge to a whole block leaves the vote without parents: no re-run to predict
                edited = validate_spec(draw_edit(spec, family, ref, LEVELS, random.Random(seed)).spec, ROLES,
                                       LEVELS)
            except SpecError:
                continue
            await ex.run(edited, "t")
            called = sum(len(lv.backend.calls) for lv in pool.levels) - before  # type: ignore[attr-defined]
            predicted = rerun_agents(spec, ref, edited, pool, ROLES, original.tokens_by_agent)
            assert called <= len(predicted), (ref, predicted)


def test_a_stop_edit_prices_the_parents_the_rule_skipped_at_the_mean_call() -> None:
    spec = validate_spec(team(), ROLES, LEVELS)
    ref = FieldRef("stop", "vote")
    edited = apply_edit(spec, ref, LEVELS).spec
    tokens = {"plan": {"prompt": 10, "completion": 10}, "v1": {"prompt": 30, "completion": 10},
              "v2": {"prompt": 30, "completion": 30}, "vote": {"prompt": 0, "completion": 0},
              "judge": {"prompt": 50, "completion": 50}}
    pool = pool_of({n: ScriptedBackend(f"m-{n}") for n in LEVELS})
    agents = rerun_agents(spec, ref, edited, pool, ROLES, tokens)
    assert agents == ["v3", "v4", "judge"]
    assert rerun_tokens(agents, tokens) == 2 * round((20 + 40 + 60 + 100) / 4) + 100
