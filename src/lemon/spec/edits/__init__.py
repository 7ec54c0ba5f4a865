"""Counterfactual edit families, as pure functions on specs: one file per family behind `EditFamily`.

- `edge` (m_E): drop one dependency edge;
- `role` (m_R): replace one agent's customised duty with its base role (empty duty);
- `capacity` (m_L): move one agent one level down the pool;
- `level` (ours): move one agent to ANOTHER level of the pool, the target drawn uniformly (see capacity.py);
- `stop` (ours): remove a voter's stop rule, or move it one notch (see stop.py).

Each edit changes exactly ONE field and returns the edited spec plus the span of that field in the ORIGINAL
canonical text: that span is where the reward contrast r(original) - r(edited) is credited. A new family is
one file plus one entry in `_TABLE`; every caller (the trainer's rollout, `lemon explain`, the token
windows of the pairwise credit) goes through the functions below, never through the field kinds.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from lemon.errors import SpecError
from lemon.spec.edits.base import Edit, EditFamily, Family
from lemon.spec.edits.capacity import CapacityFamily, LevelFamily, change_capacity, lower_capacity
from lemon.spec.edits.edge import EdgeFamily, delete_edge
from lemon.spec.edits.role import RoleFamily, revert_duty
from lemon.spec.edits.stop import StopFamily, remove_stop, stop_variants
from lemon.spec.model import Spec
from lemon.spec.render import FieldKind, FieldRef, render_stop

_TABLE: dict[str, EditFamily] = {f.name: f for f in (EdgeFamily(), RoleFamily(), CapacityFamily(), LevelFamily(),
                                                     StopFamily())}
#: The method's three deterministic operators (m_E, m_R, m_L).
FAMILIES: tuple[Family, ...] = ("edge", "role", "capacity")
#: One deterministic operator per kind of field (what `lemon explain` enumerates): the method's three and stop.
FIELD_FAMILIES: tuple[Family, ...] = (*FAMILIES, "stop")
#: Every family a trainer may draw from.
ALL_FAMILIES: tuple[Family, ...] = ("edge", "role", "capacity", "level", "stop")
#: The family whose deterministic operator edits each kind of field.
_OWNER: dict[FieldKind, str] = {"edge": "edge", "duty": "role", "capacity": "capacity", "stop": "stop"}


def family(name: str) -> EditFamily:
    """The family called `name`; a one-line SpecError names the known ones."""
    try:
        return _TABLE[name]
    except KeyError:
        raise SpecError(f"unknown edit family {name!r}; expected one of {', '.join(ALL_FAMILIES)}") from None


def applicable_edits(spec: Spec, family_name: str, levels: Sequence[str]) -> list[FieldRef]:
    """Every field where `family_name` applies, in spec order."""
    return family(family_name).fields(spec, levels)


def apply_edit(spec: Spec, ref: FieldRef, levels: Sequence[str]) -> Edit:
    """The deterministic edit of the family that owns field `ref`."""
    owner = _OWNER.get(ref.kind)
    if owner is None or (ref.kind == "edge" and ref.parent is None):
        raise SpecError(f"field {ref} has no counterfactual edit")
    return _TABLE[owner].apply(spec, ref, levels)


def draw_edit(spec: Spec, family_name: str, ref: FieldRef, levels: Sequence[str], rng: random.Random) -> Edit:
    """An edit of `family_name` on `ref`, drawing a variant where the family has several."""
    return family(family_name).apply(spec, ref, levels, rng)


def describe_edit(edit: Edit, original: Spec) -> str:
    """The edit in words."""
    return family(edit.family).describe(original, edit.spec, edit.field)


def field_value(spec: Spec, ref: FieldRef) -> str | None:
    """What `ref` holds in `spec` as text (a level, a duty, "edge", a rendered stop rule); None when the agent,
    the edge or the rule is absent."""
    if ref.agent not in spec.names:
        return None
    agent = spec.agent(ref.agent)
    values: dict[FieldKind, str | None] = {
        "capacity": agent.capacity, "duty": agent.duty, "role": agent.role,
        "edge": "edge" if ref.parent in agent.depends_on else None,
        "stop": render_stop(agent.stop) if agent.stop is not None else None}
    return values[ref.kind]


def rewrite_window(text: str, start: int, end: int, kind: str, replacement: str) -> tuple[int, int, str]:
    """The characters an edit rewrites in the canonical text, and what it writes there, so the edited text is
    what the canonical rendering of the edited spec reads: a deleted edge takes its ", " separator with it
    (`[a, b]` minus b is `[a]`), a removed stop rule its whole `stop:` line; anything else is in place."""
    if kind == "edge":
        if text[max(0, start - 2):start] == ", ":
            return start - 2, end, ""
        if text[end:end + 2] == ", ":
            return start, end + 2, ""
        return start, end, ""
    if kind == "stop" and not replacement:
        line = text.rfind("\n", 0, start) + 1
        return line, end + (text[end:end + 1] == "\n"), ""
    return start, end, replacement


__all__ = ["ALL_FAMILIES", "FAMILIES", "FIELD_FAMILIES", "Edit", "EditFamily", "Family", "applicable_edits",
           "apply_edit", "change_capacity", "delete_edge", "describe_edit", "draw_edit", "family", "field_value",
           "lower_capacity", "remove_stop", "revert_duty", "rewrite_window", "stop_variants"]
