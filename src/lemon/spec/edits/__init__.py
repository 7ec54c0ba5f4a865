"""Counterfactual edit families, as pure functions on specs: one file per family behind `EditFamily`.

- `edge` (m_E): drop one dependency edge;
- `role` (m_R): replace one agent's customised duty with its base role (empty duty);
- `capacity` (m_L): move one agent one level down the pool;
- `level` (ours): move one agent to ANOTHER level of the pool, the target drawn uniformly (see capacity.py);
- `stop` (ours): remove a voter's stop rule, or move it one notch (see stop.py);
- `copies` (ours): one copy fewer (or more) in a `copies: n` block (see copies.py).

Each edit changes exactly ONE field and returns the edited spec plus the span of that field in the
ORIGINAL canonical text: that span is where the reward contrast r(original) - r(edited) is credited. A new family is
one file (exposing `FAMILIES`) plus one line in `_FILES`; every caller (the trainer's rollout, `lemon explain`,
the token windows of the pairwise credit, the re-run planner, the viewer) goes through the functions below,
never through the field kinds.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Sequence

from lemon.errors import SpecError
from lemon.spec.edits.base import Edit, EditFamily, Family, same_written_field
from lemon.spec.edits.capacity import change_capacity, lower_capacity
from lemon.spec.edits.edge import delete_edge
from lemon.spec.edits.role import revert_duty
from lemon.spec.edits.stop import remove_stop, stop_variants
from lemon.spec.model import Spec
from lemon.spec.render import FieldKind, FieldRef

#: The family files, one a line, in the order their families are listed. The first family of a field kind is
#: that kind's deterministic operator (what `lemon explain` enumerates).
_FILES = (
    "edge",
    "role",
    "capacity",
    "stop",
    "copies",
)


def _load(files: Sequence[str]) -> dict[str, EditFamily]:
    """The registry: every family of every file, by name (built once, at import)."""
    found = [f for name in files for f in importlib.import_module(f"{__name__}.{name}").FAMILIES]
    return {f.name: f for f in found}


_TABLE = _load(_FILES)
#: The method's three deterministic operators (m_E, m_R, m_L).
FAMILIES: tuple[Family, ...] = ("edge", "role", "capacity")
#: Every family a trainer may draw from.
ALL_FAMILIES: tuple[Family, ...] = tuple(_TABLE)
#: The family whose deterministic operator edits each kind of field (the first registered of that kind).
_OWNER: dict[FieldKind, EditFamily] = {k: next(f for f in _TABLE.values() if f.kind == k)
                                       for k in dict.fromkeys(f.kind for f in _TABLE.values())}
#: One deterministic operator per kind of field: the method's three and stop.
FIELD_FAMILIES: tuple[Family, ...] = tuple(f.name for f in _OWNER.values())


def family(name: str) -> EditFamily:
    """The family called `name`; a one-line SpecError names the known ones."""
    try:
        return _TABLE[name]
    except KeyError:
        raise SpecError(f"unknown edit family {name!r}; expected one of {', '.join(ALL_FAMILIES)}") from None


def owner(kind: str) -> EditFamily:
    """The family whose deterministic operator edits fields of `kind`."""
    try:
        return _OWNER[kind]  # type: ignore[index]
    except KeyError:
        raise SpecError(f"a field of kind {kind!r} has no counterfactual edit") from None


def applicable_edits(spec: Spec, family_name: str, levels: Sequence[str]) -> list[FieldRef]:
    """Every field where `family_name` applies, in spec order; a field a `copies` block writes once is listed once."""
    return same_written_field(spec, family(family_name).fields(spec, levels))


def apply_edit(spec: Spec, ref: FieldRef, levels: Sequence[str]) -> Edit:
    """The deterministic edit of the family that owns field `ref`."""
    return owner(ref.kind).apply(spec, ref, levels)


def draw_edit(spec: Spec, family_name: str, ref: FieldRef, levels: Sequence[str], rng: random.Random) -> Edit:
    """An edit of `family_name` on `ref`, drawing a variant where the family has several."""
    return family(family_name).apply(spec, ref, levels, rng)


def describe_edit(edit: Edit, original: Spec | None = None) -> str:
    """The edit in words (`original` defaults to the spec the edit was made from)."""
    return family(edit.family).describe(original or edit.original, edit.spec, edit.field)


def field_value(spec: Spec, ref: FieldRef) -> str | None:
    """What `ref` holds in `spec` as text (a level, a duty, "edge", a rendered stop rule); None when the agent,
    the edge or the rule is absent."""
    if ref.agent not in spec.names:
        return None
    return owner(ref.kind).value(spec, ref)


def rewrite_window(text: str, start: int, end: int, kind: str, replacement: str) -> tuple[int, int, str]:
    """The characters an edit of a `kind` field rewrites in the canonical text, and what it writes there, so the
    edited text is what the canonical rendering of the edited spec reads (each family's own rule)."""
    return owner(kind).rewrite(text, start, end, replacement)


def changes_request(spec: Spec, edited: Spec, ref: FieldRef, model_of: Callable[[str], str]) -> bool:
    """Whether the edit of `ref` changes its own agent's request (see `EditFamily.changes_request`)."""
    return owner(ref.kind).changes_request(spec, edited, ref, model_of)


__all__ = ["ALL_FAMILIES", "FAMILIES", "FIELD_FAMILIES", "Edit", "EditFamily", "Family", "applicable_edits",
           "apply_edit", "change_capacity", "changes_request", "delete_edge", "describe_edit", "draw_edit", "family",
           "field_value", "lower_capacity", "owner", "remove_stop", "revert_duty", "rewrite_window", "stop_variants"]
