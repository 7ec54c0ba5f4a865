"""Turning an orchestrator's raw output into a valid spec: parse, repair what is mechanical, else fall back.

Repairs are limited to edits that cannot change what the writer meant in a way a person would dispute:
dropping references to agents that do not exist, self-references and duplicates; dropping forward
references only where they close a cycle (a DAG may be written in any order); renaming duplicate names;
filling an unknown or missing `output` with the unique sink (else the last agent); and mapping an unknown
role or capacity to a documented default. Every repair is reported as a warning; nothing is repaired
silently.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lemon.errors import SpecError
from lemon.orchestrator.template import team_of, team_spec, teams_identity
from lemon.spec.model import MAX_AGENTS, MAX_DUTY_LEN, NAME_PATTERN, Spec
from lemon.spec.parse import load_data, parse_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec

_NAME_RE = re.compile(NAME_PATTERN)
_BAD_DUTY_CHARS = re.compile(r'["\\\x00-\x1f\x7f]')
_FALLBACK_ROLE = "generalist"


def extract_object_text(raw: str) -> str:
    """The spec text inside a model reply: a fenced block, else from the first `{`/`agents:` on."""
    fenced = re.search(r"```(?:json|yaml|yml)?\s*\n(.*?)```", raw, re.DOTALL)
    if fenced:
        return fenced.group(1).strip()
    brace = raw.find("{")
    agents = raw.find("agents:")
    starts = [i for i in (brace, agents) if i >= 0]
    return raw[min(starts):].strip() if starts else raw.strip()


def _load_data(text: str) -> Any:
    """JSON or safe YAML through the spec parser's hardened loader; None when it cannot be decoded."""
    try:
        return load_data(text)
    except SpecError:
        return None


def _slug(value: object, fallback: str) -> str:
    s = re.sub(r"[^a-z0-9_]+", "_", str(value).strip().lower()).strip("_")
    if not s or not s[0].isalpha():
        s = f"{fallback}_{s}".strip("_")
    return s[:24]


def repair_spec_data(
    data: Any, roles: RoleLibrary, levels: Sequence[str]
) -> tuple[dict[str, Any], list[str]]:
    """Mechanically repair a decoded spec mapping; returns the repaired mapping and the warnings."""
    if not isinstance(data, dict) or not isinstance(data.get("agents"), list) or not data["agents"]:
        raise SpecError("orchestrator output has no non-empty 'agents' list")
    warnings: list[str] = []
    agents: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, raw_agent in enumerate(data["agents"][:MAX_AGENTS]):
        if not isinstance(raw_agent, dict):
            warnings.append(f"dropped agent {i}: not a mapping")
            continue
        agent = _repair_agent(i, raw_agent, roles, levels, seen, warnings)
        agents.append(agent)
        seen.add(agent["name"])
    agents = _resolve_dependencies(agents, warnings)
    if not agents:
        raise SpecError("orchestrator output has no usable agent")
    if len(data["agents"]) > MAX_AGENTS:
        warnings.append(f"kept the first {MAX_AGENTS} of {len(data['agents'])} agents")
    return {"agents": agents, "output": _repair_output(data.get("output"), agents, warnings)}, warnings


def _repair_agent(i: int, raw_agent: dict[str, Any], roles: RoleLibrary, levels: Sequence[str], seen: set[str],
                  warnings: list[str]) -> dict[str, Any]:
    """Agent `i` with a valid, unused name, a known role and capacity, a bounded duty and string dependencies."""
    name = raw_agent.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        new = _slug(name or f"agent_{i}", "agent")
        warnings.append(f"agent {i}: renamed {name!r} to {new!r}")
        name = new
    base, k = name, 2
    while name in seen:
        name = f"{base[:21]}_{k}"
        k += 1
    if name != base:
        warnings.append(f"agent {i}: duplicate name {base!r} renamed to {name!r}")
    role = raw_agent.get("role")
    if role not in roles:
        warnings.append(f"agent {name!r}: unknown role {role!r} replaced by {_FALLBACK_ROLE!r}")
        role = _FALLBACK_ROLE
    capacity = raw_agent.get("capacity")
    if capacity not in levels:
        default_level = levels[len(levels) // 2]
        warnings.append(f"agent {name!r}: unknown capacity {capacity!r} replaced by {default_level!r}")
        capacity = default_level
    duty = raw_agent.get("duty") or ""
    if not isinstance(duty, str):
        duty = str(duty)
    cleaned = _BAD_DUTY_CHARS.sub(" ", duty).strip()[:MAX_DUTY_LEN]
    if cleaned != duty:
        warnings.append(f"agent {name!r}: duty cleaned to one bounded line")
    deps_in = raw_agent.get("depends_on") or []
    if isinstance(deps_in, str):
        deps_in = [deps_in]
    raw_deps = [d for d in deps_in if isinstance(d, str)] if isinstance(deps_in, list) else []
    return {"name": name, "role": role, "duty": cleaned, "capacity": capacity, "depends_on": raw_deps}


def _repair_output(output: Any, agents: list[dict[str, Any]], warnings: list[str]) -> str:
    """`output` if it names an agent, else the single sink (or the last agent when there are several)."""
    if isinstance(output, str) and output in {a["name"] for a in agents}:
        return output
    used = {d for a in agents for d in a["depends_on"]}
    sinks = [a["name"] for a in agents if a["name"] not in used]
    new_output = sinks[0] if len(sinks) == 1 else agents[-1]["name"]
    warnings.append(f"output {output!r} names no agent; using {new_output!r}")
    return str(new_output)


def fallback_spec(task: str, roles: RoleLibrary, levels: Sequence[str]) -> Spec:
    """What runs in place of unusable output: the default orchestration's team for the task (`team_of`).

    Why not a fixed default spec (`prompts/fallback.yaml`, a 0.5B solver then a 1.5B critic, until
    2026-11-27): on MMLU the six-benchmark table's trained policies wrote unusable output on 28 and 24 of 60
    pairs, and that spec scored below chance there (the critic kept the weak solver's option on 48 of 52);
    HumanEval asks for code, not a spec, so it ran on all 60. The template's team is the measured best default
    for each kind (`prompts/teams.yaml` says why), so a failed orchestrator costs what no orchestration would.
    """
    return team_spec(team_of(task), roles, levels)


def fallback_identity() -> str:
    """What `fallback_spec` runs, for the identity of a run whose orchestrator may fall back (prompted, trained).

    Beside `fallback_spec` so that a change of one is seen with the other: runs drawn under another fallback
    (`fallback.yaml`'s, before 2026-11-27) are never resumed into, and a change of the teams moves these runs
    as it moves the template's.
    """
    return "fallback=" + teams_identity()


def downstream_output(spec: Spec) -> tuple[Spec, str | None]:
    """Move an `output` that has descendants to the last sink below it, so no agent downstream is wasted.

    An orchestrator once named a middle agent as output: the 1.5B "final decision maker" after it never ran.
    Agents below the output cannot change the answer, so the last sink among its descendants (the agent
    that reads, transitively, the named output) becomes the output instead; the change is reported.
    """
    output = spec.final_agent()
    below = spec.descendants(output)
    if not below:
        return spec, None
    has_child = {p for a in spec.agents for p in a.depends_on}
    sinks = [a.name for a in spec.agents if a.name in below and a.name not in has_child]
    new = sinks[-1]
    return spec.model_copy(update={"output": new}), (
        f"output {output!r} had agents downstream of it ({', '.join(sorted(below))}) that would never run; "
        f"using {new!r}")


def spec_from_output(
    raw: str, task: str, roles: RoleLibrary, levels: Sequence[str]
) -> tuple[Spec, str, tuple[str, ...]]:
    """(spec, source, warnings) for a raw orchestrator reply to `task`; never raises for bad model output."""
    text = extract_object_text(raw)
    try:
        spec, moved = downstream_output(validate_spec(parse_spec(text), roles, levels))
        return (spec, "model", ()) if moved is None else (spec, "repaired", (f"spec repaired ({moved})",))
    except SpecError as first:
        reason = str(first)
    try:
        data, warnings = repair_spec_data(_load_data(text), roles, levels)
        spec, moved = downstream_output(validate_spec(Spec.model_validate(data), roles, levels))
        extra = () if moved is None else (moved,)
        return spec, "repaired", (f"spec repaired ({reason})", *warnings, *extra)
    except (SpecError, ValueError) as exc:
        return fallback_spec(task, roles, levels), "fallback", (
            f"orchestrator output unusable ({reason}; {exc}); using the default orchestration's team",)


def _resolve_dependencies(agents: list[dict[str, Any]], warnings: list[str]) -> list[dict[str, Any]]:
    """Keep the dependencies that name another agent, in any written order, unless they form a cycle.

    A writer often lists the final agent first; a spec may (the runtime orders the DAG), so such edges are
    kept. Only a cycle forces dropping edges, and then the ones that point forward in the written order.
    """
    names = {a["name"] for a in agents}
    for a in agents:
        kept: list[str] = []
        for d in a["depends_on"]:
            if d in names and d != a["name"] and d not in kept:
                kept.append(d)
            else:
                warnings.append(f"agent {a['name']!r}: dropped dependency {d!r} (not another agent)")
        a["depends_on"] = kept
    placed: set[str] = set()
    remaining = list(agents)
    while remaining:
        ready = [a for a in remaining if set(a["depends_on"]) <= placed]
        if not ready:
            break  # a cycle
        placed.update(a["name"] for a in ready)
        remaining = [a for a in remaining if a["name"] not in placed]
    if not remaining:
        return agents
    earlier: set[str] = set()
    for a in agents:
        for d in a["depends_on"]:
            if d not in earlier:
                warnings.append(f"agent {a['name']!r}: dropped dependency {d!r} (a later agent, in a cycle)")
        a["depends_on"] = [d for d in a["depends_on"] if d in earlier]
        earlier.add(a["name"])
    return agents
