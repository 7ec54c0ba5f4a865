"""m_E: delete one dependency edge (the child no longer reads the parent's output)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from lemon.errors import SpecError
from lemon.spec.edits.base import Edit, EditFamily, Family, FieldEdits, agent_of, make_edit
from lemon.spec.model import Spec
from lemon.spec.render import FieldKind, FieldRef, render_spec


def delete_edge(spec: Spec, child: str, parent: str) -> Edit:
    """`child` no longer reads `parent`'s output."""
    a = agent_of(spec, child)
    if parent not in a.depends_on:
        raise SpecError(f"cannot delete edge: agent {child!r} does not depend on {parent!r}")
    spans = render_spec(spec).spans  # an edge to a `copies` block is written once: it goes for every copy
    written = spans[FieldRef("edge", child, parent)]
    deps = tuple(p for p in a.depends_on if p != parent and spans[FieldRef("edge", child, p)] != written)
    return make_edit(spec, "edge", FieldRef("edge", child, parent), depends_on=deps)


class EdgeFamily(FieldEdits):
    name: Family = "edge"
    kind: FieldKind = "edge"

    def fields(self, spec: Spec, levels: Sequence[str]) -> list[FieldRef]:
        return [FieldRef("edge", a.name, p) for a in spec.agents for p in a.depends_on]

    def apply(self, spec: Spec, ref: FieldRef, levels: Sequence[str], rng: random.Random | None = None) -> Edit:
        if ref.parent is None:
            raise SpecError(f"field {ref} is not an edge")
        return delete_edge(spec, ref.agent, ref.parent)

    def describe(self, spec: Spec, edited: Spec, ref: FieldRef) -> str:
        return f"delete edge {ref.parent} -> {ref.agent}"

    def value(self, spec: Spec, ref: FieldRef) -> str | None:
        return "edge" if ref.parent in spec.agent(ref.agent).depends_on else None

    def rewrite(self, text: str, start: int, end: int, replacement: str) -> tuple[int, int, str]:
        """A deleted edge takes its ", " separator with it (`[a, b]` minus b is `[a]`); the last one takes the
        whole `depends_on` line (no parents is the default, which the canonical text leaves out)."""
        if text[start - 1:start] == "[" and text[end:end + 2] == "]\n":
            return text.rfind("\n", 0, start) + 1, end + 2, ""
        if text[max(0, start - 2):start] == ", ":
            return start - 2, end, ""
        if text[end:end + 2] == ", ":
            return start, end + 2, ""
        return start, end, ""


FAMILIES: tuple[EditFamily, ...] = (EdgeFamily(),)
