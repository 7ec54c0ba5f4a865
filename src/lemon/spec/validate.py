"""Graph and reference checks that the schema alone cannot express.

`validate_spec` returns the spec NORMALISED (`output` filled in with the unique sink), so every later stage
(runtime, rendering, edits) sees one canonical form. Every failure names the agent and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from pydantic import ValidationError

from lemon.errors import SpecError
from lemon.spec.model import Agent, Spec
from lemon.spec.parse import describe_validation_error, parse_spec, spec_data
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


def _agent_problems(spec: Spec, roles: RoleLibrary, levels: Sequence[str]) -> Iterator[str]:
    """Every name, reference, role and capacity problem, agent by agent, in spec order."""
    if dup := _duplicates(spec.names):
        yield f"duplicate agent name {dup[0]!r}; every agent needs a unique name"
    known = set(spec.names)
    for a in spec.agents:
        if a.role not in roles:
            yield f"agent {a.name!r}, field role: unknown base role {a.role!r}; known roles: {', '.join(roles.names)}"
        if a.capacity not in levels:
            yield (f"agent {a.name!r}, field capacity: unknown level {a.capacity!r}; "
                   f"this pool has: {', '.join(levels)}")
        if a.name in a.depends_on:
            yield f"agent {a.name!r}, field depends_on: an agent cannot depend on itself"
        if dup := _duplicates(a.depends_on):
            yield f"agent {a.name!r}, field depends_on: {dup[0]!r} is listed twice"
        for p in a.depends_on:
            if p not in known:
                yield f"agent {a.name!r}, field depends_on: no agent is named {p!r}"
        if a.role in roles and roles[a.role].votes and not a.depends_on:
            yield f"agent {a.name!r}: role {a.role!r} votes over its parents, so it needs depends_on"
        if a.stop is not None:
            yield from _stop_problems(a, roles)


def _stop_problems(a: Agent, roles: RoleLibrary) -> Iterator[str]:
    """A stop rule belongs on a voting agent and must be able to fire within the parents it has."""
    assert a.stop is not None
    where = f"agent {a.name!r}, field stop"
    if a.role in roles and not roles[a.role].votes:
        yield f"{where}: only a voting agent (e.g. role majority_vote) can stop early; remove stop or change role"
        return
    n = len(a.depends_on)
    if n < 2:
        yield f"{where}: a stop rule needs at least 2 parents to choose among; add parents or remove stop"
        return
    limit = a.stop.max if a.stop.max is not None else n
    if limit > n:
        yield f"{where}: max {limit} exceeds its {n} parents; lower max or add parents"
    elif a.stop.criterion is None and limit < 2:
        yield (f"{where}: a gate alone with max {limit} decides nothing (that parent is taken either way); "
               "raise max to 2 or more, or remove stop")
    elif a.stop.least_parents > limit:
        yield f"{where}: agree {a.stop.least_parents} can never fire with at most {limit} parents; lower agree"


def validate_spec(spec: Spec, roles: RoleLibrary, levels: Sequence[str]) -> Spec:
    """Check names, references, roles, capacities, acyclicity and the output agent; return it normalised.
    Raises on the first problem (`spec_problems` lists them all)."""
    for problem in _agent_problems(spec, roles, levels):
        raise SpecError(problem)
    topological_order(spec)
    known = set(spec.names)
    if spec.output is not None:
        if spec.output not in known:
            raise SpecError(f"field output: no agent is named {spec.output!r}; name the final agent")
        return spec
    sinks = spec.sinks()
    if len(sinks) != 1:
        raise SpecError(f"field output: missing, and the spec has {len(sinks)} final agents "
                        f"({', '.join(sinks)}); add 'output: <name>'")
    return spec.model_copy(update={"output": sinks[0]})


def spec_problems(text: str, roles: RoleLibrary, levels: Sequence[str]) -> list[str]:
    """EVERY problem of spec text (`lemon validate` lists them; `load_spec` stops at the first): all schema
    errors, else all agent problems, else the graph's (cycle, output). Unreadable text is one problem."""
    try:
        data = spec_data(text)
    except SpecError as exc:
        return [str(exc)]
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        locs = [tuple(e["loc"]) for e in exc.errors()]
        # A container's error caused by an error inside it (`agents` too short once an agent failed) is noise.
        return [describe_validation_error(exc, data, i) for i, loc in enumerate(locs)
                if not any(len(other) > len(loc) and other[:len(loc)] == loc for other in locs)]
    problems = list(_agent_problems(spec, roles, levels))
    if problems:
        return problems  # the graph checks below assume every reference resolves
    try:
        validate_spec(spec, roles, levels)
    except SpecError as exc:
        return [str(exc)]
    return []


def load_spec(text: str, roles: RoleLibrary, levels: Sequence[str]) -> Spec:
    """Parse and validate spec text in one step."""
    return validate_spec(parse_spec(text), roles, levels)
