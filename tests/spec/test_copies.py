"""The `copies` short form: `copies: n` reads as n identical agents, canonical rendering writes such a run back
as one block (round trip exact, every span still holds its field), and the `copies` edit family resizes it."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings

from lemon.errors import SpecError
from lemon.evaluation.baselines import baseline_spec
from lemon.spec.copies import copy_groups
from lemon.spec.edits import applicable_edits, apply_edit, draw_edit, field_value
from lemon.spec.model import Spec, StopRule
from lemon.spec.parse import parse_spec
from lemon.spec.render import FieldRef, render_spec
from tests.spec_strategies import LEVELS, specs_with_copies

SHORT = """agents:
  - name: cot
    copies: 3
    role: math_solver
    duty: "Think step by step."
    capacity: large
  - name: vote
    role: majority_vote
    capacity: large
    depends_on: [cot]
    stop: {agree: 2}
output: vote
"""


def test_copies_reads_as_that_many_agents_and_a_reference_as_all_of_them() -> None:
    spec = parse_spec(SHORT)
    assert spec.names == ("cot_1", "cot_2", "cot_3", "vote")
    assert spec.agent("vote").depends_on == ("cot_1", "cot_2", "cot_3")
    assert {spec.agent(n).duty for n in spec.names[:3]} == {"Think step by step."}
    assert parse_spec(SHORT.replace("copies: 3", "copies: 1")).names == ("cot", "vote")


@pytest.mark.parametrize(("text", "message"), [
    (SHORT.replace("copies: 3", "copies: 0"), "copies: '0' is not a whole number from 1 to 11"),
    (SHORT.replace("copies: 3", "copies: lots"), "copies: 'lots' is not a whole number"),
    (SHORT.replace("copies: 3", "copies: 99999"), "copies: '99999' is not a whole number"),
    (SHORT.replace("output: vote", "output: cot"), "output 'cot' names 3 copies"),
])
def test_a_bad_copies_field_is_one_line_naming_the_fix(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(")) as info:
        parse_spec(text)
    assert "\n" not in str(info.value)


def test_a_vote_team_renders_once_per_block_at_a_third_of_the_characters() -> None:
    spec = baseline_spec("esc", "number", level="large", n=5)
    text = render_spec(spec).text
    assert "copies: 5" in text and text.count("role: math_solver") == 1 and "depends_on: [cot]" in text
    long_form = sum(len(a.model_dump_json()) for a in spec.agents)
    assert len(text) < long_form / 3
    assert parse_spec(text) == spec


@settings(max_examples=80, deadline=None)
@given(spec=specs_with_copies())
def test_render_round_trips_and_every_span_holds_its_field_with_copies(spec: Spec) -> None:
    rendered = render_spec(spec)
    assert parse_spec(rendered.text) == spec
    for ref, span in rendered.spans.items():
        written = rendered.text[span.start:span.end]
        if ref.kind == "edge":
            assert written == ref.parent or (ref.parent or "").startswith(f"{written}_")
        elif ref.kind == "copies":
            [group] = [g for g in copy_groups(spec) if g.names[0] == ref.agent]
            assert int(written) == len(group.names) > 1
        else:
            assert written == getattr(spec.agent(ref.agent), ref.kind)


def test_a_field_written_once_for_a_block_is_edited_for_every_copy() -> None:
    spec = baseline_spec("esc", "number", level="large", n=5)
    refs = applicable_edits(spec, "capacity", LEVELS)
    assert [r.agent for r in refs] == ["cot_1", "vote"]  # one written field per block
    edited = apply_edit(spec, refs[0], LEVELS).spec
    assert {edited.agent(f"cot_{i}").capacity for i in range(1, 6)} == {"medium"}
    assert parse_spec(render_spec(edited).text) == edited and "copies: 5" in render_spec(edited).text


def test_the_copies_family_drops_the_last_copy_and_clamps_the_stop_rule() -> None:
    spec = baseline_spec("sc-cot", "number", level="large", n=3)
    vote = spec.agents[-1].model_copy(update={"stop": StopRule(agree=2, max=3)})
    spec = spec.model_copy(update={"agents": (*spec.agents[:-1], vote)})
    [ref] = applicable_edits(spec, "copies", LEVELS)
    edit = apply_edit(spec, ref, LEVELS)
    assert render_spec(spec).text[edit.span.start:edit.span.end] == "3"
    assert edit.spec.names == ("cot_1", "cot_2", "vote") and edit.spec.agent("vote").stop == StopRule(agree=2)
    assert field_value(spec, ref) == "3" and field_value(edit.spec, ref) == "2"
    grown = {len(draw_edit(spec, "copies", ref, LEVELS, random.Random(s)).spec.agents) for s in range(20)}
    assert grown == {3, 5}


def test_a_resize_that_leaves_fewer_parents_than_agree_is_refused() -> None:
    spec = baseline_spec("esc", "number", level="large", n=2)
    with pytest.raises(SpecError, match="needs 2 agreeing parents; 1 would be left"):
        apply_edit(spec, FieldRef("copies", "cot_1"), LEVELS)
