"""A stop rule's `logprob` gate (issue 24): a parent whose reply the model was sure of is taken alone.

The field validates as a whole number of nats in its bounds (hostile values are one-line errors naming the
fix), may stand alone or beside one of agree / confidence, renders in a fixed key order inside the rule's own
span, round-trips, leaves every gate-less rule's text and dump as they were, and the `stop` edit family moves
it by 5 nats or drops it, offering only rules that validate."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lemon.errors import SpecError
from lemon.evaluation.baselines import baseline_spec
from lemon.spec.edits import applicable_edits, describe_edit, draw_edit, stop_variants
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.parse import parse_spec
from lemon.spec.render import FieldRef, render_spec, render_stop
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import load_spec, validate_spec
from tests.pools import LEVELS
from tests.spec_strategies import stop_rules

ROLES = RoleLibrary.load()


def team(n: int, rule: StopRule | None) -> Spec:
    voters = tuple(Agent(name=f"v{i}", role="math_solver", duty=f"Voter {i}.", capacity="large") for i in range(n))
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(v.name for v in voters),
                 stop=rule)
    return Spec(agents=(*voters, vote), output="vote")


def text_with(rule: str, parents: int = 3) -> str:
    names = ", ".join(f"v{i}" for i in range(parents))
    return ("agents:\n" + "".join(f"  - {{name: v{i}, role: math_solver, capacity: large}}\n" for i in range(parents))
            + f"  - {{name: vote, role: majority_vote, capacity: large, depends_on: [{names}], stop: {rule}}}\n")


@pytest.mark.parametrize("value", ["5", "0", "-2.5", "true", "false", "'twenty'", "-1001", "-0x19", "' -25'",
                                   ".inf", "-.inf", ".nan", "-99999999999999999999999999999999999999",
                                   "-" + "9" * 5000, "[-25]", "{a: 1}"])
def test_a_hostile_gate_is_one_line_naming_the_fix(value: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(text_with(f"{{logprob: {value}, agree: 2}}"), ROLES, LEVELS)
    message = str(err.value)
    assert "\n" not in message and len(message) < 300
    assert "field stop.logprob" in message
    assert "whole number of nats from -1000 to -1" in message and "e.g. -25" in message


@pytest.mark.parametrize("value", [True, False, -2.5, -25.0, float("nan"), 10**400, "-25 "])
def test_a_gate_built_in_python_is_checked_the_same_way(value: object) -> None:
    with pytest.raises(ValueError, match="whole number of nats"):
        StopRule(agree=2, logprob=value)  # type: ignore[arg-type]


def test_json_spec_text_reads_the_gate_too() -> None:
    spec = load_spec('{"agents": [{"name": "a", "role": "math_solver", "capacity": "large"}, '
                     '{"name": "b", "role": "math_solver", "capacity": "large"}, {"name": "vote", '
                     '"role": "majority_vote", "capacity": "large", "depends_on": ["a", "b"], '
                     '"stop": {"logprob": -25, "agree": 2}}]}', ROLES, LEVELS)
    assert spec.agent("vote").stop == StopRule(logprob=-25, agree=2)


@pytest.mark.parametrize(("rule", "first_wave"), [
    ("{logprob: -25}", 1), ("{logprob: -25, agree: 2}", 1), ("{logprob: -1, confidence: 0.9}", 1),
    ("{logprob: -1000, agree: 3, max: 3, wave: 2}", 1), ("{agree: 3}", 3), ("{confidence: 0.9}", 2),
    ("{logprob: -25, max: 2}", 1),
])
def test_a_gate_stands_alone_or_beside_one_criterion_and_starts_with_one_parent(rule: str, first_wave: int) -> None:
    spec = load_spec(text_with(rule), ROLES, LEVELS)
    stop = spec.agent("vote").stop
    assert stop is not None and stop.first_wave == first_wave
    assert render_stop(stop) == rule  # already canonical: the fixed key order, defaults left out


@pytest.mark.parametrize(("rule", "message"), [
    ("{logprob: -25, agree: 2, confidence: 0.9}", "not both"),
    ("{max: 2}", "or a gate: logprob"),
    ("{logprob: -25, max: 1}", "a gate alone with max 1 decides nothing"),
    ("{logprob: -25, agree: 4}", "agree 4 can never fire with at most 3 parents"),
    ("{logprob: -25, agree: 3, max: 2}", "cannot exceed max"),
    ("{logprob: -25, max: 4}", "max 4 exceeds its 3 parents"),
    ("{logprob: -25, sure: yes}", "unknown field"),
])
def test_combinations_a_gate_cannot_make_are_refused(rule: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(text_with(rule), ROLES, LEVELS)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_gate_renders_first_inside_the_rule_s_own_span_and_round_trips() -> None:
    spec = validate_spec(team(5, StopRule(agree=2, max=4, wave=2, logprob=-25)), ROLES, LEVELS)
    rendered = render_spec(spec)
    span = rendered.spans[FieldRef("stop", "vote")]
    assert rendered.text[span.start:span.end] == "{logprob: -25, agree: 2, max: 4, wave: 2}"
    assert "    stop: {logprob: -25, agree: 2, max: 4, wave: 2}\n" in rendered.text
    assert parse_spec(rendered.text) == spec
    assert [r.kind for r in rendered.spans if r.agent == "vote"].count("stop") == 1  # no span of its own


def test_rules_without_a_gate_render_and_dump_as_before() -> None:
    esc = baseline_spec("esc", "number", level="large", n=5)
    assert render_spec(esc).text.endswith("    depends_on: [cot]\n    stop: {agree: 2}\noutput: vote\n")
    assert render_stop(StopRule(confidence=0.95, max=4, wave=2)) == "{confidence: 0.95, max: 4, wave: 2}"
    dumped = esc.agent("vote").model_dump(mode="json")["stop"]
    assert dumped == {"agree": 2, "confidence": None, "max": None, "wave": 1}  # what traces' topology held
    gated = StopRule(agree=2, logprob=-25).model_dump(mode="json")
    assert gated["logprob"] == -25 and StopRule.model_validate(gated) == StopRule(agree=2, logprob=-25)


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 8), stop_rules)
def test_every_rule_round_trips_through_its_canonical_text(n: int, rule: StopRule) -> None:
    try:
        spec = validate_spec(team(n, rule), ROLES, LEVELS)
    except SpecError:
        return  # a rule these parents cannot hold (max beyond them, agree above them)
    rendered = render_spec(spec)
    assert parse_spec(rendered.text) == spec
    span = rendered.spans[FieldRef("stop", "vote")]
    assert rendered.text[span.start:span.end] == render_stop(rule)
    assert parse_spec(render_spec(parse_spec(rendered.text)).text) == spec


def test_variants_move_the_gate_by_five_nats_or_drop_it() -> None:
    vote = team(5, StopRule(agree=2, logprob=-25)).agent("vote")
    got = {render_stop(r) for r in stop_variants(vote)}
    assert got == {"{logprob: -25, agree: 3}", "{logprob: -25, agree: 2, max: 3}", "{logprob: -30, agree: 2}",
                   "{logprob: -20, agree: 2}", "{agree: 2}"}


@pytest.mark.parametrize(("rule", "gates"), [
    (StopRule(logprob=-3, confidence=0.9), {-8, -1, None}),  # clamped at -1
    (StopRule(logprob=-1, agree=2), {-6, None}),  # already at the top: only down, or dropped
    (StopRule(logprob=-997, agree=2), {-1000, -992, None}),  # clamped at -1000
    (StopRule(logprob=-25), {-30, -20}),  # alone: dropping it would leave no criterion
])
def test_gate_variants_are_clamped_to_the_bounds_and_validate(rule: StopRule, gates: set[int | None]) -> None:
    spec = team(4, rule)
    variants = stop_variants(spec.agent("vote"))
    assert {r.logprob for r in variants if r.logprob != rule.logprob} == gates
    for r in variants:
        edited = spec.model_copy(update={"agents": (*spec.agents[:-1], spec.agent("vote").model_copy(
            update={"stop": r}))})
        assert validate_spec(edited, ROLES, LEVELS).agent("vote").stop == StopRule.model_validate(r.model_dump())


def test_rules_without_a_gate_keep_their_variants() -> None:
    vote = team(6, StopRule(agree=3, max=4)).agent("vote")
    assert [render_stop(r) for r in stop_variants(vote)] == [
        "{agree: 2, max: 4}", "{agree: 4, max: 4}", "{agree: 3, max: 3}", "{agree: 3}"]


def test_a_gate_edit_is_described_in_words() -> None:
    spec = validate_spec(team(5, StopRule(agree=2, logprob=-25)), ROLES, LEVELS)
    [ref] = applicable_edits(spec, "stop", LEVELS)
    said = {}
    for seed in range(60):
        edit = draw_edit(spec, "stop", ref, LEVELS, random.Random(seed))
        said[render_stop(edit.spec.agent("vote").stop) if edit.spec.agent("vote").stop else None] = \
            describe_edit(edit, spec)
    assert said["{logprob: -20, agree: 2}"] == (
        "change the stop rule of vote: {logprob: -25, agree: 2} -> {logprob: -20, agree: 2}; the gate is stricter: "
        "a parent is taken alone at log-probability >= -20 instead of >= -25")
    assert said["{logprob: -30, agree: 2}"].endswith("the gate is looser: a parent is taken alone at "
                                                     "log-probability >= -30 instead of >= -25")
    assert said["{agree: 2}"].endswith("-> {agree: 2}; no parent is taken alone any more")
    assert said[None] == "remove the stop rule of vote ({logprob: -25, agree: 2}): every parent runs"
