"""What every counterfactual edit family is: one small Protocol, and the pieces they share.

A family changes exactly ONE field of a spec and returns the edited spec plus the span of that field in the
ORIGINAL canonical text: the span is where the reward contrast r(original) - r(edited) is credited. One file
per family (`edge.py`, `role.py`, `capacity.py`, `stop.py`); the table in `__init__.py` names them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from lemon.errors import SpecError
from lemon.spec.model import Agent, Spec
from lemon.spec.render import FieldKind, FieldRef, Span, render_spec

Family = Literal["edge", "role", "capacity", "level", "stop"]


@dataclass(frozen=True, slots=True)
class Edit:
    spec: Spec
    family: Family
    field: FieldRef
    span: Span


class EditFamily(Protocol):
    """One family of single-field edits."""

    name: Family
    kind: FieldKind  # the kind of field it edits

    def fields(self, spec: Spec, levels: Sequence[str]) -> list[FieldRef]:
        """Every field of `spec` where this family applies, in spec order."""
        ...

    def apply(self, spec: Spec, ref: FieldRef, levels: Sequence[str], rng: random.Random | None = None) -> Edit:
        """The edit of `ref`: the family's deterministic operator, or with `rng` a drawn variant where the
        family has several (`level`'s target, `stop`'s k +/- 1). Raises `SpecError` when impossible."""
        ...

    def describe(self, spec: Spec, edited: Spec, ref: FieldRef) -> str:
        """The edit in words, for `lemon explain` and the viewer."""
        ...


def agent_of(spec: Spec, name: str) -> Agent:
    try:
        return spec.agent(name)
    except KeyError:
        raise SpecError(f"no agent is named {name!r}") from None


def replace_agent(spec: Spec, name: str, **update: object) -> Spec:
    agents = tuple(a.model_copy(update=update) if a.name == name else a for a in spec.agents)
    return spec.model_copy(update={"agents": agents})


def make_edit(spec: Spec, family: Family, ref: FieldRef, **update: object) -> Edit:
    """`ref`'s agent updated, with the field's span in the original canonical text."""
    span = render_spec(spec).spans[ref]
    return Edit(replace_agent(spec, ref.agent, **update), family, ref, span)
