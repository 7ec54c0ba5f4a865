"""Canonical rendering round-trips, spans are exact, and the three edit operators change one field only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from lemon.errors import SpecError
from lemon.spec.edits import FAMILIES, applicable_edits, apply_edit, delete_edge, lower_capacity, revert_duty
from lemon.spec.model import Agent, Spec
from lemon.spec.parse import parse_spec
from lemon.spec.render import FieldRef, render_spec
from tests.spec_strategies import LEVELS, specs


def _value(spec: Spec, ref: FieldRef) -> str:
    agent = spec.agent(ref.agent)
    if ref.kind == "edge":
        assert ref.parent in agent.depends_on
        return ref.parent or ""
    return str(getattr(agent, ref.kind))


@settings(max_examples=100, deadline=None)
@given(spec=specs())
def test_parse_of_render_is_identity(spec: Spec) -> None:
    assert parse_spec(render_spec(spec).text) == spec


@settings(max_examples=100, deadline=None)
@given(spec=specs())
def test_every_span_holds_exactly_its_field(spec: Spec) -> None:
    rendered = render_spec(spec)
    n_edges = sum(len(a.depends_on) for a in spec.agents)
    n_duties = sum(bool(a.duty) for a in spec.agents)  # an empty duty is the default: not written, no span
    assert len(rendered.spans) == 2 * len(spec.agents) + n_duties + n_edges
    assert ('duty: ""' in rendered.text, "depends_on: []" in rendered.text) == (False, False)
    for ref, span in rendered.spans.items():
        assert rendered.text[span.start:span.end] == _value(spec, ref)


@settings(max_examples=80, deadline=None)
@given(spec=specs())
def test_each_edit_changes_exactly_one_field_at_its_span(spec: Spec) -> None:
    before = render_spec(spec)
    for family in FAMILIES:
        for ref in applicable_edits(spec, family, LEVELS):
            edit = apply_edit(spec, ref, LEVELS)
            assert edit.family == family and edit.span == before.spans[ref]
            changed = [a.name for a, b in zip(spec.agents, edit.spec.agents, strict=True) if a != b]
            assert changed == [ref.agent]
            after = render_spec(edit.spec)
            # Every other field keeps its value; the edited one is gone (edge) or changed (duty, capacity).
            for other, span in before.spans.items():
                if other != ref:
                    assert after.text[after.spans[other].start:after.spans[other].end] == \
                        before.text[span.start:span.end]
            if ref.kind == "edge":
                assert ref not in after.spans
            else:
                assert _value(edit.spec, ref) != _value(spec, ref)


SPEC = Spec(agents=(
    Agent(name="a", role="analyst", duty="List facts.", capacity="small"),
    Agent(name="b", role="math_solver", duty="", capacity="large", depends_on=("a",)),
), output="b")


def test_operators_and_their_refusals() -> None:
    e = delete_edge(SPEC, "b", "a")
    assert e.spec.agent("b").depends_on == () and render_spec(SPEC).text[e.span.start:e.span.end] == "a"
    r = revert_duty(SPEC, "a")
    assert r.spec.agent("a").duty == "" and r.spec.agent("a").role == "analyst"
    c = lower_capacity(SPEC, "b", LEVELS)
    assert c.spec.agent("b").capacity == "medium"
    with pytest.raises(SpecError, match="does not depend"):
        delete_edge(SPEC, "a", "b")
    with pytest.raises(SpecError, match="already uses its base role"):
        revert_duty(SPEC, "b")
    with pytest.raises(SpecError, match="already at the lowest level"):
        lower_capacity(SPEC, "a", LEVELS)
    with pytest.raises(SpecError, match="no agent is named"):
        revert_duty(SPEC, "zz")
