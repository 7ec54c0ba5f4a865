"""m_R: revert one agent's customised duty to its base role (an empty duty)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from lemon.errors import SpecError
from lemon.spec.edits.base import Edit, EditFamily, Family, FieldEdits, agent_of, make_edit
from lemon.spec.model import Spec
from lemon.spec.render import FieldKind, FieldRef


def revert_duty(spec: Spec, agent: str) -> Edit:
    """`agent` keeps its base role but loses its customised duty."""
    a = agent_of(spec, agent)
    if not a.duty:
        raise SpecError(f"cannot revert duty: agent {agent!r} already uses its base role {a.role!r} as is")
    return make_edit(spec, "role", FieldRef("duty", agent), duty="")


class RoleFamily(FieldEdits):
    name: Family = "role"
    kind: FieldKind = "duty"

    def fields(self, spec: Spec, levels: Sequence[str]) -> list[FieldRef]:
        return [FieldRef("duty", a.name) for a in spec.agents if a.duty]

    def apply(self, spec: Spec, ref: FieldRef, levels: Sequence[str], rng: random.Random | None = None) -> Edit:
        return revert_duty(spec, ref.agent)

    def rewrite(self, text: str, start: int, end: int, replacement: str) -> tuple[int, int, str]:
        """A reverted duty is the default, which the canonical text leaves out: its whole `duty: "..."` line
        goes (the span is the duty between its quotes)."""
        if replacement:
            return start, end, replacement
        line = text.rfind("\n", 0, start) + 1
        return line, end + 1 + (text[end + 1:end + 2] == "\n"), ""

    def describe(self, spec: Spec, edited: Spec, ref: FieldRef) -> str:
        return f"revert duty of {ref.agent} to base role {spec.agent(ref.agent).role}"

    def value(self, spec: Spec, ref: FieldRef) -> str | None:
        return spec.agent(ref.agent).duty


FAMILIES: tuple[EditFamily, ...] = (RoleFamily(),)
