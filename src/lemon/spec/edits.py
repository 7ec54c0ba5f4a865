"""The three counterfactual edit operators of the method, as pure functions on specs.

Each changes exactly ONE field and returns the edited spec plus the span of that field in the ORIGINAL
canonical text: that span is where the reward contrast r(original) - r(edited) is credited.
- `delete_edge` (m_E): drop one dependency edge;
- `revert_duty` (m_R): replace one agent's customised duty with its base role (empty duty);
- `lower_capacity` (m_L): move one agent one level down the pool;
- `change_capacity` (family `level`, ours): move one agent to ANOTHER level of the pool, up or down, the
  target drawn uniformly by the caller. Why: with `lower` alone, Δ = r(chosen) - r(one level below) rewards a
  `medium` that beats `small` (a large contrast) more than a `large` that beats `medium` (a small one), so
  the credit pushes the policy towards the middle level; against a uniformly drawn other level,
  E[Δ] = n/(n-1) * (r(chosen) - mean over all levels), which ranks the levels correctly (measured with
  `benchmarks/bench_learning.py`).
An edit that is impossible (no such edge, already the base role, already the weakest level) raises
`SpecError`; `applicable_edits` lists the fields where a family applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from lemon.errors import SpecError
from lemon.spec.model import Agent, Spec
from lemon.spec.render import FieldRef, Span, render_spec

Family = Literal["edge", "role", "capacity", "level"]
#: The method's three deterministic operators: one edit per field (what `lemon explain` enumerates).
FAMILIES: tuple[Family, ...] = ("edge", "role", "capacity")
#: Every family a trainer may draw from, `level` (a target drawn by the caller) included.
ALL_FAMILIES: tuple[Family, ...] = (*FAMILIES, "level")


@dataclass(frozen=True, slots=True)
class Edit:
    spec: Spec
    family: Family
    field: FieldRef
    span: Span


def _agent(spec: Spec, name: str) -> Agent:
    try:
        return spec.agent(name)
    except KeyError:
        raise SpecError(f"no agent is named {name!r}") from None


def _replace(spec: Spec, name: str, **update: object) -> Spec:
    agents = tuple(a.model_copy(update=update) if a.name == name else a for a in spec.agents)
    return spec.model_copy(update={"agents": agents})


def _edit(spec: Spec, family: Family, ref: FieldRef, **update: object) -> Edit:
    span = render_spec(spec).spans[ref]
    return Edit(_replace(spec, ref.agent, **update), family, ref, span)


def delete_edge(spec: Spec, child: str, parent: str) -> Edit:
    """`child` no longer reads `parent`'s output."""
    a = _agent(spec, child)
    if parent not in a.depends_on:
        raise SpecError(f"cannot delete edge: agent {child!r} does not depend on {parent!r}")
    deps = tuple(p for p in a.depends_on if p != parent)
    return _edit(spec, "edge", FieldRef("edge", child, parent), depends_on=deps)


def revert_duty(spec: Spec, agent: str) -> Edit:
    """`agent` keeps its base role but loses its customised duty."""
    a = _agent(spec, agent)
    if not a.duty:
        raise SpecError(f"cannot revert duty: agent {agent!r} already uses its base role {a.role!r} as is")
    return _edit(spec, "role", FieldRef("duty", agent), duty="")


def lower_capacity(spec: Spec, agent: str, levels: Sequence[str]) -> Edit:
    """`agent` runs one capacity level lower (levels are weakest first)."""
    a = _agent(spec, agent)
    if a.capacity not in levels:
        raise SpecError(f"cannot lower capacity: {a.capacity!r} is not one of {', '.join(levels)}")
    i = list(levels).index(a.capacity)
    if i == 0:
        raise SpecError(f"cannot lower capacity: agent {agent!r} is already at the lowest level {a.capacity!r}")
    return _edit(spec, "capacity", FieldRef("capacity", agent), capacity=levels[i - 1])


def change_capacity(spec: Spec, agent: str, target: str, levels: Sequence[str]) -> Edit:
    """`agent` runs at `target`, another level of the pool (family `level`)."""
    a = _agent(spec, agent)
    if target not in levels or target == a.capacity:
        raise SpecError(f"cannot change capacity of {agent!r} to {target!r}: choose another of {', '.join(levels)}")
    return _edit(spec, "level", FieldRef("capacity", agent), capacity=target)


def applicable_edits(spec: Spec, family: Family, levels: Sequence[str]) -> list[FieldRef]:
    """Every field where `family` applies, in spec order."""
    if family == "edge":
        return [FieldRef("edge", a.name, p) for a in spec.agents for p in a.depends_on]
    if family == "role":
        return [FieldRef("duty", a.name) for a in spec.agents if a.duty]
    if family == "capacity":
        low = levels[0] if levels else None
        return [FieldRef("capacity", a.name) for a in spec.agents if a.capacity in levels and a.capacity != low]
    if family == "level":
        return [FieldRef("capacity", a.name) for a in spec.agents if a.capacity in levels and len(levels) > 1]
    raise SpecError(f"unknown edit family {family!r}; expected one of {', '.join(ALL_FAMILIES)}")


def apply_edit(spec: Spec, ref: FieldRef, levels: Sequence[str]) -> Edit:
    """The edit of the family that owns field `ref`."""
    if ref.kind == "edge" and ref.parent is not None:
        return delete_edge(spec, ref.agent, ref.parent)
    if ref.kind == "duty":
        return revert_duty(spec, ref.agent)
    if ref.kind == "capacity":
        return lower_capacity(spec, ref.agent, levels)
    raise SpecError(f"field {ref} has no counterfactual edit")
