"""The `stop` edit family: remove a voter's rule or move it one notch; every variant validates, and the
text window an edit rewrites turns the original canonical text into the edited spec's."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lemon.errors import SpecError
from lemon.spec.edits import (
    ALL_FAMILIES,
    applicable_edits,
    apply_edit,
    describe_edit,
    draw_edit,
    field_value,
    rewrite_window,
    stop_variants,
)
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.render import FieldRef, render_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from tests.pools import LEVELS
from tests.spec_strategies import stop_rules

ROLES = RoleLibrary.load()


def team(n: int, rule: StopRule | None) -> Spec:
    voters = tuple(Agent(name=f"v{i}", role="math_solver", duty="Think." if i % 2 else "", capacity=LEVELS[i % 3],
                         depends_on=("v0",) if i == n - 1 and n > 2 else ()) for i in range(n))
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(v.name for v in voters[1:]),
                 stop=rule)
    return Spec(agents=(*voters, vote), output="vote")




def test_remove_is_the_deterministic_operator_and_says_so() -> None:
    spec = validate_spec(team(6, StopRule(agree=2, max=4)), ROLES, LEVELS)
    edit = apply_edit(spec, FieldRef("stop", "vote"), LEVELS)
    assert edit.family == "stop" and edit.spec.agent("vote").stop is None
    text = render_spec(spec).text
    assert text[edit.span.start:edit.span.end] == "{agree: 2, max: 4}"
    assert describe_edit(edit, spec) == "remove the stop rule of vote ({agree: 2, max: 4}): every parent runs"
    with pytest.raises(SpecError, match="has none"):
        apply_edit(edit.spec, FieldRef("stop", "vote"), LEVELS)


def test_variants_move_one_notch() -> None:
    vote = team(6, StopRule(agree=3, max=4)).agent("vote")
    got = {(r.agree, r.max) for r in stop_variants(vote)}
    # k -/+ 1; max + 2 clamped to all 5 parents (written as no max); max - 2 clamped to k
    assert got == {(2, 4), (4, 4), (3, None), (3, 3)}


@given(st.integers(3, 8), stop_rules, st.integers(0, 10_000))
def test_every_drawn_stop_edit_validates_and_its_window_rewrites_the_text(n: int, rule: StopRule, seed: int) -> None:
    spec = team(n, rule)
    try:
        spec = validate_spec(spec, ROLES, LEVELS)
    except SpecError:
        return  # a rule the team cannot hold (max beyond its parents): validation's business, tested elsewhere
    for family in ALL_FAMILIES:
        for ref in applicable_edits(spec, family, LEVELS):
            try:
                edit = draw_edit(spec, family, ref, LEVELS, random.Random(seed))
            except SpecError:
                continue  # e.g. lowering the lowest level
            try:
                edited = validate_spec(edit.spec, ROLES, LEVELS)
            except SpecError:
                assert family == "edge"  # only an edge deletion may leave a vote short of parents
                continue
            text = render_spec(spec).text
            start, end, new = rewrite_window(text, edit.span.start, edit.span.end, ref.kind,
                                             "" if ref.kind == "edge" else field_value(edited, ref) or "")
            assert text[:start] + new + text[end:] == render_spec(edited).text, (family, ref)
