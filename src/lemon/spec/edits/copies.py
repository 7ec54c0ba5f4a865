"""`copies` (ours): change how many copies a `copies: n` block stands for, so credit reaches the team's size.

How many voters an item needs is the decision adaptive orchestration is about, and with the short form it is
one written field (`lemon.spec.copies`). The deterministic operator drops the last copy (n -> n - 1: Δ says
what the last voter bought on this item); drawn variants are n - 1 and n + 1. A child's stop rule is clamped to
the parents left (`max`), and an edit that would leave fewer parents than its `agree` is impossible."""

from __future__ import annotations

import random
from collections.abc import Sequence

from lemon.errors import SpecError
from lemon.spec.copies import CopyGroup, copy_groups, copy_names
from lemon.spec.edits.base import Edit, EditFamily, Family, FieldEdits
from lemon.spec.model import MAX_AGENTS, Agent, Spec
from lemon.spec.render import FieldKind, FieldRef


def group_of(spec: Spec, first: str) -> CopyGroup:
    for g in copy_groups(spec):
        if g.names[0] == first:
            return g
    raise SpecError(f"agent {first!r} is not the first of a copies block")


def _rewire(a: Agent, old: tuple[str, ...], new: tuple[str, ...]) -> Agent:
    """`a` reading the group's `new` copies instead of its `old` ones, its stop rule clamped to them."""
    if not set(old) & set(a.depends_on):
        return a
    at = a.depends_on.index(old[0])
    deps = (*a.depends_on[:at], *new, *a.depends_on[at + len(old):])
    rule = a.stop
    need = rule.required_agreement if rule is not None else None
    if need is not None and need > len(deps):
        raise SpecError(f"{a.name}'s stop rule needs {need} agreeing parents; {len(deps)} would be left")
    if rule is not None and rule.max is not None and rule.max >= len(deps):
        rule = rule.model_copy(update={"max": None})
    return a.model_copy(update={"depends_on": deps, "stop": rule})


def resize(spec: Spec, first: str, n: int) -> Edit:
    """The block starting at agent `first` with `n` copies (at least 1)."""
    group = group_of(spec, first)
    if not 1 <= n <= MAX_AGENTS - (len(spec.agents) - len(group.names)):
        raise SpecError(f"cannot give {group.base} {n} copies: a spec has 1 to {MAX_AGENTS} agents")
    names, body = copy_names(group.base, n), spec.agent(first)
    copies = tuple(body.model_copy(update={"name": c}) for c in names)
    agents: list[Agent] = []
    for a in spec.agents:
        if a.name == first:
            agents.extend(copies)
        elif a.name not in group.names:
            agents.append(_rewire(a, group.names, names))
    return Edit(spec.model_copy(update={"agents": tuple(agents)}), "copies", FieldRef("copies", first), spec)


class CopiesFamily(FieldEdits):
    name: Family = "copies"
    kind: FieldKind = "copies"

    def fields(self, spec: Spec, levels: Sequence[str]) -> list[FieldRef]:
        return [FieldRef("copies", g.names[0]) for g in copy_groups(spec)]

    def apply(self, spec: Spec, ref: FieldRef, levels: Sequence[str], rng: random.Random | None = None) -> Edit:
        n = len(group_of(spec, ref.agent).names)
        return resize(spec, ref.agent, n - 1 if rng is None or n >= MAX_AGENTS - 1 else rng.choice((n - 1, n + 1)))

    def describe(self, spec: Spec, edited: Spec, ref: FieldRef) -> str:
        group = group_of(spec, ref.agent)
        after = sum(1 for a in edited.agents if a.name.startswith(f"{group.base}_") and a.role == spec.agent(
            ref.agent).role)
        return f"change the copies of {group.base}: {len(group.names)} -> {after}"

    def value(self, spec: Spec, ref: FieldRef) -> str | None:
        group = next((g for g in copy_groups(spec) if g.names[0] == ref.agent), None)
        return str(len(group.names)) if group else None


FAMILIES: tuple[EditFamily, ...] = (CopiesFamily(),)
