"""Graph and reference checks that the schema alone cannot express.

`validate_spec` returns the spec NORMALISED (`output` filled in with the unique sink), so every later stage
(runtime, rendering, edits) sees one canonical form. Every failure names the agent and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lemon.errors import SpecError
from lemon.spec.model import Spec
from lemon.spec.parse import parse_spec
from lemon.spec.roles import RoleLibrary


def topological_order(spec: Spec) -> tuple[str, ...]:
    """Agents in dependency order (stable: spec order among ready agents); raises `SpecError` on a cycle."""
    names = spec.names
    indegree = {a.name: len(a.depends_on) for a in spec.agents}
    order: list[str] = []
    ready = [n for n in names if indegree[n] == 0]
    while ready:
        cur = ready.pop(0)
        order.append(cur)
        for child in spec.children(cur):
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    if len(order) != len(names):
        raise SpecError(f"dependency cycle: {' -> '.join(_find_cycle(spec))}; remove one of these dependencies")
    return tuple(order)


def _find_cycle(spec: Spec) -> list[str]:
    """One cycle, as a closed path of names (for the error message)."""
    parents = {a.name: a.depends_on for a in spec.agents}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for p in parents[n]:
            if state.get(p) == 1:
                return [*stack[stack.index(p):], p]
            if p not in state and (found := visit(p)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in spec.names:
        if n not in state and (found := visit(n)):
            return list(reversed(found))
    return []


def _duplicates(values: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    return sorted({v for v in values if v in seen or seen.add(v)})  # type: ignore[func-returns-value]


def validate_spec(spec: Spec, roles: RoleLibrary, levels: Sequence[str]) -> Spec:
    """Check names, references, roles, capacities, acyclicity and the output agent; return it normalised."""
    if dup := _duplicates(spec.names):
        raise SpecError(f"duplicate agent name {dup[0]!r}; every agent needs a unique name")
    known = set(spec.names)
    for a in spec.agents:
        if a.role not in roles:
            raise SpecError(f"agent {a.name!r}, field role: unknown base role {a.role!r}; "
                            f"known roles: {', '.join(roles.names)}")
        if a.capacity not in levels:
            raise SpecError(f"agent {a.name!r}, field capacity: unknown level {a.capacity!r}; "
                            f"this pool has: {', '.join(levels)}")
        if a.name in a.depends_on:
            raise SpecError(f"agent {a.name!r}, field depends_on: an agent cannot depend on itself")
        if dup := _duplicates(a.depends_on):
            raise SpecError(f"agent {a.name!r}, field depends_on: {dup[0]!r} is listed twice")
        for p in a.depends_on:
            if p not in known:
                raise SpecError(f"agent {a.name!r}, field depends_on: no agent is named {p!r}")
        if roles[a.role].kind == "vote" and not a.depends_on:
            raise SpecError(f"agent {a.name!r}: role {a.role!r} votes over its parents, so it needs depends_on")
    topological_order(spec)
    if spec.output is not None:
        if spec.output not in known:
            raise SpecError(f"field output: no agent is named {spec.output!r}; name the final agent")
        return spec
    sinks = spec.sinks()
    if len(sinks) != 1:
        raise SpecError(f"field output: missing, and the spec has {len(sinks)} final agents "
                        f"({', '.join(sinks)}); add 'output: <name>'")
    return spec.model_copy(update={"output": sinks[0]})


def load_spec(text: str, roles: RoleLibrary, levels: Sequence[str]) -> Spec:
    """Parse and validate spec text in one step."""
    return validate_spec(parse_spec(text), roles, levels)
