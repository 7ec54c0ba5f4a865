"""Orchestration traces in the schema of method.md §6 (arXiv 2605.02801), with an explicit `stop` event.

A trace is a time-ordered list of events (spawn, message, return, aggregate, stop, ...) and typed edges
between them, plus costs and the agents' outputs (referenced from events by `content_ref`). Traces are
saved as JSON and double as training data.

Every reader of a saved or stored trace goes through `Trace.from_json`: the JSON form carries its format's
`version`, an older version is upgraded there and a newer one refused in one line, so no reader walks a
dict of a shape it does not know.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, Required, TypedDict, cast

from lemon.errors import TraceError
from lemon.files import write_atomic

#: The version of the trace's JSON form that this LEMON writes (`Trace.to_json`'s `version`). Version 1 is every
#: trace written before the field existed (no `version` key; some without `task` and `prompts`): it is upgraded
#: on reading. Bump it when a field changes meaning, with the step that upgrades the previous version
#: (`_UPGRADES`), so that traces already stored keep reading.
TRACE_VERSION = 2

EVENT_TYPES = frozenset({"orchestrator_decision", "spawn", "despawn", "message", "tool_call", "tool_result",
                         "return", "aggregate", "human_intervention", "safety_event", "stop"})
EDGE_TYPES = frozenset({"temporal", "causal", "spawn", "message", "tool_dependency", "return", "aggregate",
                        "safety_flow"})

#: One trace event: its id, time, type and agent, and the fields its type carries (spawn: role, capacity,
#: duty; message: from, to, content_ref; return: tokens, cached, model, sent, votes, params (a model call's
#: temperature, max_tokens, top_p, seed); stop: reason, detail,
#: and a stop rule's decision (with a logprob gate: scores, sure); orchestrator_decision: how the spec was
#: written).
TraceEvent = TypedDict("TraceEvent", {
    "id": Required[str], "t": Required[float], "type": Required[str], "agent": Required[str],
    "role": str, "capacity": str, "duty": str, "from": "str | list[str]", "to": str, "content_ref": str,
    "tokens": int, "cached": bool, "prompt_tokens": int, "completion_tokens": int, "model": str,
    "sent": float, "votes": "dict[str, str | None]", "reason": str, "detail": str, "rule": str, "fired": bool,
    "ran": "list[str]", "skipped": "list[str]", "tokens_saved_estimate": int, "source": str,
    "warnings": "list[str]", "raw": str, "level": str, "kind": str, "orchestrator": str,
    "scores": "dict[str, float | None]", "sure": str, "params": "dict[str, float | int | None]",
}, total=False)


class TraceEdge(TypedDict):
    src: str
    dst: str
    type: str


class AgentTokens(TypedDict, total=False):
    """One agent's tokens in a run (`RunResult.tokens_by_agent`), and what served it."""

    prompt: Required[int]
    completion: Required[int]
    capacity: str
    cached: bool
    model: str


class StopDecision(TypedDict):
    """What one stop rule decided in a run (`RunResult.early_stops`); a rule with a gate adds the scores of the
    parents it checked (a `logprob` gate: nats, None for a parent that calls no model; an `examples` gate: 1 for
    a program that passed, 0, None without examples) and the sure parent (None if none)."""

    agent: str
    rule: str
    fired: bool
    ran: list[str]
    skipped: list[str]
    tokens_saved_estimate: int
    scores: NotRequired[dict[str, float | None]]
    sure: NotRequired[str | None]
    # a controller's (`learned`): after which parents it decided, the action, P(leader right), the parent chosen
    decisions: NotRequired[list[dict[str, object]]]


class TopologyAgent(TypedDict, total=False):
    """One agent of the spec that ran (`Agent.model_dump(mode="json")`)."""

    name: Required[str]
    role: str
    duty: str
    capacity: str
    depends_on: list[str]
    stop: dict[str, object] | None


class Topology(TypedDict, total=False):
    """The spec that ran: its agents in spec order, the output agent, and its edges as [parent, child]."""

    agents: list[TopologyAgent]
    output: str
    edges: list[list[str]]


class System(TypedDict, total=False):
    """What the run ran on: the pool (and how the caller named it), its levels and each level's model, the seed
    and the run's sampling settings, and the sample bank's draw order where one was replayed."""

    pool: str
    pool_ref: str
    levels: list[str]
    models: dict[str, str]
    seed: int
    temperature: float
    max_tokens: int | None
    draw_order: list[int]


class Costs(TypedDict, total=False):
    """What the run cost: tokens (the spec's, cached agents included), tokens computed, wall time, messages,
    model calls, tokens charged to the budget."""

    tokens: int
    spent_tokens: int
    wall_clock_s: float
    messages: int
    calls: int
    charged_tokens: int


class Metrics(TypedDict, total=False):
    """How the run ended and what it used, per level and per agent; the agents not run and why."""

    status: str
    node_cache_hits: int
    llm_cache_hits: int
    tokens_by_level: dict[str, int]
    tokens_by_agent: dict[str, AgentTokens]
    skipped_agents: list[str]
    unrun_agents: list[str]
    early_stops: list[StopDecision]


#: A trace's top-level fields and the JSON type each has where present (`Trace.to_json`): what `from_json` checks
#: before any reader walks them (`lemon trace` of a trace whose events were a number was a TypeError traceback).
_FIELD_TYPES: dict[str, type] = {"events": list, "edges": list, "system": dict, "topology": dict, "costs": dict,
                                 "metrics": dict, "contents": dict, "prompts": dict, "rewards": dict, "task": str,
                                 "task_id": str, "trace_id": str}


@dataclass
class Trace:
    task_id: str | None = None
    trace_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    events: list[TraceEvent] = field(default_factory=list)
    edges: list[TraceEdge] = field(default_factory=list)
    rewards: dict[str, float] = field(default_factory=dict)
    costs: Costs = field(default_factory=lambda: Costs())
    system: System = field(default_factory=lambda: System())
    topology: Topology = field(default_factory=lambda: Topology())
    metrics: Metrics = field(default_factory=lambda: Metrics())
    contents: dict[str, str] = field(default_factory=dict)
    # What a person needs to read a run without the benchmark files: the task text and each agent's messages
    # ({agent: [{"role", "content"}, ...]}, exactly what its model was sent). Traces stored before these
    # fields existed load with them empty (`from_json`).
    task: str | None = None
    prompts: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    version: int = field(default=TRACE_VERSION, init=False)  # the format's, written by `to_json`
    _t0: float = field(default_factory=time.perf_counter, repr=False)

    def event(self, type_: str, agent: str, **extra: object) -> TraceEvent:
        """Append an event (ids are `e<index>`, `t` is seconds since the run started) and return it."""
        if type_ not in EVENT_TYPES:
            raise ValueError(f"unknown trace event type {type_!r}")
        ev = cast(TraceEvent, {"id": f"e{len(self.events)}", "t": round(time.perf_counter() - self._t0, 6),
                               "type": type_, "agent": agent, **{k: v for k, v in extra.items() if v is not None}})
        self.events.append(ev)
        return ev

    def edge(self, src: TraceEvent | str, dst: TraceEvent | str, type_: str) -> None:
        if type_ not in EDGE_TYPES:
            raise ValueError(f"unknown trace edge type {type_!r}")
        s = src["id"] if isinstance(src, dict) else src
        d = dst["id"] if isinstance(dst, dict) else dst
        self.edges.append({"src": s, "dst": d, "type": type_})

    def to_json(self) -> dict[str, object]:
        return {"version": self.version, "trace_id": self.trace_id, "task_id": self.task_id, "system": self.system,
                "topology": self.topology, "events": self.events, "edges": self.edges, "rewards": self.rewards,
                "costs": self.costs, "metrics": self.metrics, "contents": self.contents, "task": self.task,
                "prompts": self.prompts}

    def compact_json(self) -> str:
        """`to_json` as compact JSON text (how the results store keeps it; `indent` would switch json to its
        pure-Python encoder, ~10x slower)."""
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"), default=str)

    @classmethod
    def from_json(cls, data: Mapping[str, object], *, source: str = "the trace") -> Trace:
        """The trace of a JSON form (`to_json`, as saved or stored), upgraded to this version: the one way a
        trace is read back. A newer version than `TRACE_VERSION` is a `TraceError` naming `source` and the fix;
        a field of the wrong JSON type is a `TypeError` (the reader names the file or row it came from)."""
        version = _version(data, source)
        checked = _checked(_upgraded(data, version))
        return cls(**checked)

    def __str__(self) -> str:
        """The run as a person reads it: the task, one line per event (who ran, what each agent said, what a stop
        rule decided), then the cost. `to_json()` holds everything; `lemon trace` and `lemon view` show it too."""
        lines = [f"trace {self.trace_id}: {_clip(self.task or '', 100)}"]
        lines += [f"{e['t']:7.2f}s {e['type']:<21} {e['agent']}{_event_detail(e, self.contents)}" for e in self.events]
        lines.append(f"status {self.metrics.get('status', '-')}, {self.costs.get('tokens', 0)} tokens, "
                     f"{self.costs.get('calls', 0)} model calls")
        return "\n".join(lines)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the trace as JSON atomically: a crash never leaves half a file, and a write that fails (a
        full disk) leaves no temporary file behind either (`lemon.files.write_atomic`)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(p, json.dumps(self.to_json(), ensure_ascii=False, indent=1))


def _version(data: Mapping[str, object], source: str) -> int:
    """The format version of a trace's JSON form (1 without the key: written before it existed)."""
    version = data.get("version")
    version = 1 if version is None else version
    if type(version) is not int or version < 1:
        raise TypeError(f"its version is {version!r:.40}, not a positive integer")
    if version > TRACE_VERSION:
        raise TraceError(f"{source} is a version {version} trace, newer than this LEMON reads (version "
                         f"{TRACE_VERSION}); upgrade LEMON (pip install -U lemon-mas) to read it")
    return version


def _upgraded(data: Mapping[str, object], version: int) -> dict[str, object]:
    """`data` brought to `TRACE_VERSION`, one step per version (each step mechanical, on a copy)."""
    out = dict(data)
    for step in _UPGRADES[version - 1:]:
        out = step(out)
    return out


def _from_v1(data: dict[str, object]) -> dict[str, object]:
    """Version 1 -> 2: the version key is new; a field absent from traces written before it existed (the task
    text, the agents' prompts) takes its empty default, as `Trace()` has it."""
    return {k: v for k, v in data.items() if k != "version"}


#: `_UPGRADES[v - 1]` turns version v into v + 1 (one step per version before `TRACE_VERSION`).
_UPGRADES: tuple[Callable[[dict[str, object]], dict[str, object]], ...] = (_from_v1,)


class _Fields(TypedDict, total=False):
    """The fields of `Trace` a JSON form gives (`_checked`)."""

    task_id: str
    trace_id: str
    events: list[TraceEvent]
    edges: list[TraceEdge]
    rewards: dict[str, float]
    costs: Costs
    system: System
    topology: Topology
    metrics: Metrics
    contents: dict[str, str]
    task: str
    prompts: dict[str, list[dict[str, str]]]


def _checked(data: Mapping[str, object]) -> _Fields:
    """The known top-level fields of `data` with their JSON types checked (lists of objects for events and
    edges); absent or null ones are left out, so they take their defaults. Within a section, readers still read
    each value defensively (a section is open JSON)."""
    out: dict[str, object] = {}
    for name, kind in _FIELD_TYPES.items():
        value = data.get(name)
        if value is None:
            continue
        if not isinstance(value, kind) or (isinstance(value, list) and not all(isinstance(x, dict) for x in value)):
            raise TypeError(f"its {name} is {value!r:.40}, not a JSON {kind.__name__}"
                            + (" of objects" if kind is list else ""))
        out[name] = value
    return cast(_Fields, out)


def _clip(text: str, n: int) -> str:
    """`text` on one line, at most `n` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def _event_detail(e: TraceEvent, contents: Mapping[str, str]) -> str:
    """What one event's line adds after its agent (`Trace.__str__`)."""
    kind = e["type"]
    if kind == "orchestrator_decision":
        return f": spec {e.get('source', '?')}, {e.get('tokens', 0)} tokens"
    if kind == "spawn":
        return f" ({e.get('role', '?')}, {e.get('capacity', '?')})"
    if kind == "message":
        return f" <- {e.get('from', '?')}"
    if kind == "return":
        votes = f", votes {e['votes']}" if "votes" in e else ""
        cached = ", cached" if e.get("cached") else ""
        return f": {e.get('tokens', 0)} tokens{cached}{votes}: {_clip(contents.get(e['agent'], ''), 80)}"
    if kind == "stop" and "rule" in e:
        fired = "fired" if e.get("fired") else "did not fire"
        return f": rule {e['rule']} {fired} after {', '.join(e.get('ran', []))}"
    if kind in ("stop", "despawn"):
        return f": {e.get('reason', '')}" + (f" ({_clip(e['detail'], 80)})" if e.get("detail") else "")
    return ""
