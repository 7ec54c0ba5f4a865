"""Stop rules: a voter's parents run lazily, in written order and waves, until the rule fires.

The scripted test double answers each voter from a table keyed by its duty, so which parents run, in which
order and what they cost is known exactly."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lemon.errors import SpecError
from lemon.llm.base import ChatRequest
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Budget, Executor, NodeCache
from lemon.runtime.executor import majority_probability, stop_rule_fires
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.parse import parse_spec
from lemon.spec.render import FieldRef, render_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import load_spec, validate_spec
from tests.pools import LEVELS, scripted_pool

ROLES = RoleLibrary.load()


def answering(answers: list[str]) -> ScriptedBackend:
    """Voter i (duty "Voter i.") answers answers[i]; a planner answers "plan"."""
    def reply(request: ChatRequest) -> str:
        system = request.messages[0].content
        for i, answer in enumerate(answers):
            if f"Voter {i}." in system:
                return answer
        return "plan"
    return ScriptedBackend("scripted", responder=reply)


def vote_team(n: int, rule: StopRule | None, extra: tuple[Agent, ...] = ()) -> Spec:
    voters = tuple(Agent(name=f"v{i}", role="math_solver", duty=f"Voter {i}.", capacity="large") for i in range(n))
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(v.name for v in voters),
                 stop=rule)
    return Spec(agents=(*extra, *voters, vote), output="vote")


def ran(result: object) -> list[str]:
    trace = result.trace  # type: ignore[attr-defined]
    return [e["agent"] for e in trace.events if e["type"] == "return" and e["agent"] != "vote"]


async def _run(answers: list[str], rule: StopRule | None, **kw: object) -> object:
    backend = answering(answers)
    spec = vote_team(len(answers), rule)
    return await Executor(scripted_pool(backend), ROLES, **kw).run(spec, "task")  # type: ignore[arg-type]


async def test_agree_two_stops_after_the_first_two_when_they_agree() -> None:
    result = await _run(["A", "A", "B", "C", "D"], StopRule(agree=2))
    assert result.status == "ok" and result.answer == "A"  # type: ignore[attr-defined]
    assert ran(result) == ["v0", "v1"] and result.calls == 2  # type: ignore[attr-defined]
    assert result.unrun == ("v2", "v3", "v4")  # type: ignore[attr-defined]
    (stop,) = [e for e in result.trace.events if e.get("reason") == "stop_rule"]  # type: ignore[attr-defined]
    assert stop["rule"] == "{agree: 2}" and stop["ran"] == ["v0", "v1"] and stop["skipped"] == ["v2", "v3", "v4"]
    assert stop["fired"] is True
    assert stop["tokens_saved_estimate"] > 0
    despawned = {e["agent"] for e in result.trace.events if e["type"] == "despawn"}  # type: ignore[attr-defined]
    assert despawned == {"v2", "v3", "v4"}
    assert set(result.tokens_by_agent) == {"v0", "v1", "vote"}  # type: ignore[attr-defined]


async def test_parents_run_in_written_order_one_more_at_a_time_until_agreement() -> None:
    result = await _run(["A", "B", "C", "B", "A"], StopRule(agree=2))
    assert ran(result) == ["v0", "v1", "v2", "v3"] and result.answer == "B"  # type: ignore[attr-defined]


async def test_max_bounds_the_parents_run_and_the_vote_uses_those_that_ran() -> None:
    result = await _run(["A", "B", "C", "D", "A"], StopRule(agree=2, max=4))
    assert ran(result) == ["v0", "v1", "v2", "v3"] and result.unrun == ("v4",)  # type: ignore[attr-defined]
    assert result.answer == "A"  # type: ignore[attr-defined]  # a four-way tie goes to the first parent
    assert result.early_stops[0]["fired"] is False  # type: ignore[attr-defined]  # max reached, no agreement


async def test_waves_start_several_parents_together() -> None:
    result = await _run(["A", "B", "C", "A", "D", "E"], StopRule(agree=2, wave=3))
    assert ran(result) == ["v0", "v1", "v2", "v3", "v4"]  # type: ignore[attr-defined]  # 2, then a wave of 3


async def test_confidence_rule_stops_once_the_majority_is_settled() -> None:
    # Beta criterion at 0.9: 3-0 gives 0.9375, so three agreeing answers stop; 2-0 gives 0.875 does not.
    result = await _run(["A", "A", "A", "B", "B", "B"], StopRule(confidence=0.9))
    assert ran(result) == ["v0", "v1", "v2"] and result.answer == "A"  # type: ignore[attr-defined]


async def test_without_a_rule_every_parent_runs() -> None:
    result = await _run(["A", "A", "B"], None)
    assert ran(result) == ["v0", "v1", "v2"] and result.unrun == ()  # type: ignore[attr-defined]


async def test_removing_the_rule_reruns_only_the_skipped_parents_through_the_node_cache() -> None:
    backend = answering(["A", "A", "B", "C", "D"])
    cache = NodeCache()
    ex = Executor(scripted_pool(backend), ROLES, node_cache=cache, params=None)
    stopped = await ex.run(vote_team(5, StopRule(agree=2)), "task", seed=3)
    full = await ex.run(vote_team(5, None), "task", seed=3)
    assert stopped.calls == 2 and full.calls == 3 and full.cache_hits == 2


async def test_a_skipped_parent_s_own_ancestors_are_not_run_either() -> None:
    plan = Agent(name="plan", role="planner", duty="Plan it.", capacity="small")
    spec = vote_team(3, StopRule(agree=2), extra=(plan,))
    agents = tuple(a.model_copy(update={"depends_on": ("plan",)}) if a.name == "v2" else a for a in spec.agents)
    spec = spec.model_copy(update={"agents": agents})
    result = await Executor(scripted_pool(answering(["A", "A", "B"])), ROLES).run(spec, "task")
    assert result.unrun == ("plan", "v2") and result.calls == 2  # type: ignore[attr-defined]


async def test_the_run_budget_still_caps_a_stop_rule_team() -> None:
    backend = answering(["A", "B", "C", "D", "E"])
    result = await Executor(scripted_pool(backend), ROLES, budget=Budget(max_tokens=40)).run(
        vote_team(5, StopRule(agree=2)), "task")
    assert result.status == "budget_exceeded" and result.charged_tokens <= 40


def test_the_rule_has_its_own_span_and_round_trips() -> None:
    spec = validate_spec(vote_team(5, StopRule(agree=2, max=4, wave=2)), ROLES, LEVELS)
    rendered = render_spec(spec)
    span = rendered.spans[FieldRef("stop", "vote")]
    assert rendered.text[span.start:span.end] == "{agree: 2, max: 4, wave: 2}"
    assert parse_spec(rendered.text) == spec
    confident = validate_spec(vote_team(3, StopRule(confidence=0.95)), ROLES, LEVELS)
    assert "stop: {confidence: 0.95}" in render_spec(confident).text
    assert parse_spec(render_spec(confident).text) == confident


@pytest.mark.parametrize(("rule", "message"), [
    ("{agree: 2, max: 9}", "max 9 exceeds its 3 parents"),
    ("{agree: 4}", "agree 4 can never fire with at most 3 parents"),
    ("{agree: 1}", "greater than or equal to 2"),
    ("{agree: 2, confidence: 0.9}", "exactly one of agree"),
    ("{}", "exactly one of agree"),
    ("{confidence: 1.5}", "less than or equal to 0.99"),
    ("{confidence: 0.951}", "at most two decimals"),
    ("{agree: 2, until: forever}", "until"),
    ("{agree: 3, max: 2}", "cannot exceed max"),
    ("yes", "stop"),
])
def test_hostile_stop_rules_are_one_line_errors(rule: str, message: str) -> None:
    text = ("agents:\n" + "".join(f"  - {{name: v{i}, role: math_solver, capacity: large}}\n" for i in range(3))
            + f"  - {{name: vote, role: majority_vote, capacity: large, depends_on: [v0, v1, v2], stop: {rule}}}\n")
    with pytest.raises(SpecError) as err:
        load_spec(text, ROLES, LEVELS)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_only_a_voter_may_carry_a_stop_rule() -> None:
    spec = vote_team(3, None)
    agents = tuple(a.model_copy(update={"role": "final_decision_maker", "stop": StopRule(agree=2)})
                   if a.name == "vote" else a for a in spec.agents)
    with pytest.raises(SpecError, match="only a voting agent"):
        validate_spec(spec.model_copy(update={"agents": agents}), ROLES, LEVELS)


def _beta_tail_by_integration(a: int, b: int, steps: int = 4000) -> float:
    """P(X > 1/2) for X ~ Beta(a + 1, b + 1) by Simpson's rule on the density (the reference)."""
    norm = math.gamma(a + b + 2) / (math.gamma(a + 1) * math.gamma(b + 1))
    h = 0.5 / steps
    f = [norm * x ** a * (1 - x) ** b for x in (0.5 + i * h for i in range(steps + 1))]
    return h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))


@given(st.integers(0, 12), st.integers(0, 12))
def test_the_beta_criterion_matches_the_integrated_posterior(lead: int, runner_up: int) -> None:
    assert majority_probability(lead, runner_up) == pytest.approx(_beta_tail_by_integration(lead, runner_up),
                                                                  abs=1e-9)


@given(st.lists(st.sampled_from(["A", "B", "C", None]), min_size=1, max_size=11), st.integers(2, 6))
def test_agree_fires_exactly_when_some_answer_has_k_votes(keys: list[str | None], k: int) -> None:
    counts = [keys.count(x) for x in {"A", "B", "C"}]
    assert stop_rule_fires(StopRule(agree=k), keys) == (max(counts) >= k)
