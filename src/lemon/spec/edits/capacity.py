"""m_L (`capacity`): one level lower; and `level` (ours): another level of the pool, drawn uniformly.

Why `level`: with `lower` alone, Δ = r(chosen) - r(one level below) rewards a `medium` that beats `small` (a
large contrast) more than a `large` that beats `medium` (a small one), so the credit pushes the policy
towards the middle level; against a uniformly drawn other level, E[Δ] = n/(n-1) * (r(chosen) - mean over all
levels), which ranks the levels correctly (measured with `benchmarks/bench_learning.py`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from lemon.errors import SpecError
from lemon.spec.edits.base import Edit, EditFamily, Family, FieldEdits, agent_of, make_edit
from lemon.spec.model import Spec
from lemon.spec.render import FieldKind, FieldRef


def lower_capacity(spec: Spec, agent: str, levels: Sequence[str]) -> Edit:
    """`agent` runs one capacity level lower (levels are weakest first)."""
    a = agent_of(spec, agent)
    if a.capacity not in levels:
        raise SpecError(f"cannot lower capacity: {a.capacity!r} is not one of {', '.join(levels)}")
    i = list(levels).index(a.capacity)
    if i == 0:
        raise SpecError(f"cannot lower capacity: agent {agent!r} is already at the lowest level {a.capacity!r}")
    return make_edit(spec, "capacity", FieldRef("capacity", agent), capacity=levels[i - 1])


def change_capacity(spec: Spec, agent: str, target: str, levels: Sequence[str]) -> Edit:
    """`agent` runs at `target`, another level of the pool (family `level`)."""
    a = agent_of(spec, agent)
    if target not in levels or target == a.capacity:
        raise SpecError(f"cannot change capacity of {agent!r} to {target!r}: choose another of {', '.join(levels)}")
    return make_edit(spec, "level", FieldRef("capacity", agent), capacity=target)


def _describe(spec: Spec, edited: Spec, ref: FieldRef, verb: str) -> str:
    return f"{verb} capacity of {ref.agent}: {spec.agent(ref.agent).capacity} -> {edited.agent(ref.agent).capacity}"


class _Levels(FieldEdits):
    """What both level families share: the field is the agent's capacity, and a move between two levels one
    model serves changes no request."""

    model_only: bool = True

    def value(self, spec: Spec, ref: FieldRef) -> str | None:
        return spec.agent(ref.agent).capacity

    def changes_request(self, spec: Spec, edited: Spec, ref: FieldRef, model_of: Callable[[str], str]) -> bool:
        return model_of(spec.agent(ref.agent).capacity) != model_of(edited.agent(ref.agent).capacity)


class CapacityFamily(_Levels):
    name: Family = "capacity"
    kind: FieldKind = "capacity"

    def fields(self, spec: Spec, levels: Sequence[str]) -> list[FieldRef]:
        low = levels[0] if levels else None
        return [FieldRef("capacity", a.name) for a in spec.agents if a.capacity in levels and a.capacity != low]

    def apply(self, spec: Spec, ref: FieldRef, levels: Sequence[str], rng: random.Random | None = None) -> Edit:
        return lower_capacity(spec, ref.agent, levels)

    def describe(self, spec: Spec, edited: Spec, ref: FieldRef) -> str:
        return _describe(spec, edited, ref, "lower")


class LevelFamily(_Levels):
    name: Family = "level"
    kind: FieldKind = "capacity"

    def fields(self, spec: Spec, levels: Sequence[str]) -> list[FieldRef]:
        return [FieldRef("capacity", a.name) for a in spec.agents if a.capacity in levels and len(levels) > 1]

    def apply(self, spec: Spec, ref: FieldRef, levels: Sequence[str], rng: random.Random | None = None) -> Edit:
        current = agent_of(spec, ref.agent).capacity
        others = [lv for lv in levels if lv != current]
        if not others:
            raise SpecError(f"cannot change capacity of {ref.agent!r}: the pool has one level")
        return change_capacity(spec, ref.agent, (rng or random.Random(0)).choice(others), levels)

    def describe(self, spec: Spec, edited: Spec, ref: FieldRef) -> str:
        return _describe(spec, edited, ref, "change")


FAMILIES: tuple[EditFamily, ...] = (CapacityFamily(), LevelFamily())
