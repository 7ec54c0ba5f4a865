"""The `copies` short form: one written agent that stands for n identical agents.

Why: spec tokens are cost. A 5-voter team written out is five identical blocks (~850 characters, a quarter of
what its workers spend on an easy item); `copies: 5` says the same in one block. The short form exists only
in text: `expand_copies` turns `{name: cot, copies: 5, ...}` into agents `cot_1 .. cot_5` before the schema
sees the data (a `depends_on` naming `cot` names all five), so the `Spec` model, the runtime, the node cache
and the sample bank never see it. `copy_groups` finds, in a `Spec`, the runs that canonical rendering folds
back, so `parse(render(s)) == s` holds for every spec, folded or not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lemon.errors import SpecError
from lemon.spec.model import MAX_AGENTS, Agent, Spec

_COUNT = re.compile(r"^[0-9]{1,3}$")


@dataclass(frozen=True, slots=True)
class CopyGroup:
    """Agents `base_1 .. base_n`, written as one block with `copies: n`."""

    base: str
    names: tuple[str, ...]


def copy_names(base: str, n: int) -> tuple[str, ...]:
    return tuple(f"{base}_{i}" for i in range(1, n + 1))


def _count(agent: dict[str, Any], index: int) -> int:
    raw = agent.get("copies")
    text = str(raw).strip() if raw is not None else ""
    if not _COUNT.match(text) or not 1 <= int(text) <= MAX_AGENTS - 1:
        raise SpecError(f"agent {index + 1}, field copies: {str(raw)[:20]!r} is not a whole number from 1 to "
                        f"{MAX_AGENTS - 1}; write e.g. copies: 5")
    return int(text)


def _expanded_refs(names: Any, groups: dict[str, tuple[str, ...]]) -> Any:
    if not isinstance(names, list):
        return names
    return [m for n in names for m in (groups.get(n, (n,)) if isinstance(n, str) else (n,))]


def expand_copies(data: dict[str, Any]) -> dict[str, Any]:
    """Spec data with every `copies: n` agent replaced by its n copies (in place of it, in order) and every
    reference to it by references to all of them. Data without `copies` is returned unchanged."""
    agents = data.get("agents")
    if not isinstance(agents, list) or not any(isinstance(a, dict) and "copies" in a for a in agents):
        return data
    groups: dict[str, tuple[str, ...]] = {}
    out: list[Any] = []
    for i, a in enumerate(agents):
        if not isinstance(a, dict) or "copies" not in a:
            out.append(a)
            continue
        n, body = _count(a, i), {k: v for k, v in a.items() if k != "copies"}
        if n == 1:
            out.append(body)
            continue
        name = body.get("name")
        if not isinstance(name, str):
            raise SpecError(f"agent {i + 1}: an agent with copies needs a name")
        groups[name] = copy_names(name, n)
        out.extend({**body, "name": copy} for copy in groups[name])
    if data.get("output") in groups:
        raise SpecError(f"output {data['output']!r} names {len(groups[data['output']])} copies; the answer "
                        "comes from one agent: add an aggregator (e.g. a majority_vote) that depends on them")
    out = [{**a, "depends_on": _expanded_refs(a.get("depends_on"), groups)} if isinstance(a, dict)
           and "depends_on" in a else a for a in out]
    return {**data, "agents": out}


def _same_block(a: Agent, b: Agent) -> bool:
    return (a.role, a.duty, a.capacity, a.depends_on, a.stop) == (b.role, b.duty, b.capacity, b.depends_on, b.stop)


def _run_at(spec: Spec, start: int) -> tuple[str, int] | None:
    """(base, length) of the longest run `base_1, base_2, ...` of identical agents starting at `start`."""
    first = spec.agents[start]
    if not first.name.endswith("_1") or first.stop is not None:
        return None
    base, n = first.name[:-2], 1
    while (start + n < len(spec.agents) and spec.agents[start + n].name == f"{base}_{n + 1}"
           and _same_block(first, spec.agents[start + n])):
        n += 1
    return (base, n) if n > 1 else None


def _foldable(spec: Spec, base: str, names: tuple[str, ...]) -> bool:
    """A run folds back only if it reads back as the same spec: its base is no agent's name, the output is not
    one copy, and every agent depends on all the copies (contiguously, in order) or on none of them."""
    if base in spec.names or spec.output in names:
        return False
    for a in spec.agents:
        hits = [i for i, p in enumerate(a.depends_on) if p in names]
        if hits and tuple(a.depends_on[hits[0]:hits[0] + len(names)]) != names:
            return False
        if hits and len(hits) != len(names):
            return False
    return True


def copy_groups(spec: Spec) -> tuple[CopyGroup, ...]:
    """The runs of `spec` that canonical rendering writes as one block with `copies`."""
    groups: list[CopyGroup] = []
    i = 0
    while i < len(spec.agents):
        run = _run_at(spec, i)
        if run is not None:
            names = copy_names(*run)
            if _foldable(spec, run[0], names):
                groups.append(CopyGroup(run[0], names))
                i += run[1]
                continue
        i += 1
    return tuple(groups)
