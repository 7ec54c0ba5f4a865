"""Orchestration traces in the schema of method.md §6 (arXiv 2605.02801), with an explicit `stop` event.

A trace is a time-ordered list of events (spawn, message, return, aggregate, stop, ...) and typed edges
between them, plus costs and the agents' outputs (referenced from events by `content_ref`). Traces are
saved as JSON and double as training data.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, Required, TypedDict, cast

from lemon.files import write_atomic

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


#: The open JSON sections of a trace (system, topology, costs, metrics): plain JSON values by key.
Section = dict[str, object]


@dataclass
class Trace:
    task_id: str | None = None
    trace_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    events: list[TraceEvent] = field(default_factory=list)
    edges: list[TraceEdge] = field(default_factory=list)
    rewards: dict[str, float] = field(default_factory=dict)
    costs: Section = field(default_factory=dict)
    system: Section = field(default_factory=dict)
    topology: Section = field(default_factory=dict)
    metrics: Section = field(default_factory=dict)
    contents: dict[str, str] = field(default_factory=dict)
    # What a person needs to read a run without the benchmark files: the task text and each agent's messages
    # ({agent: [{"role", "content"}, ...]}, exactly what its model was sent). Traces stored before these
    # fields existed load with them empty (`from_json`).
    task: str | None = None
    prompts: dict[str, list[dict[str, str]]] = field(default_factory=dict)
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
        return {"trace_id": self.trace_id, "task_id": self.task_id, "system": self.system,
                "topology": self.topology, "events": self.events, "edges": self.edges, "rewards": self.rewards,
                "costs": self.costs, "metrics": self.metrics, "contents": self.contents, "task": self.task,
                "prompts": self.prompts}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Trace:
        """A trace from its JSON form; fields absent from traces of older versions get their defaults."""
        known = ("task_id", "trace_id", "events", "edges", "rewards", "costs", "system", "topology", "metrics",
                 "contents", "task", "prompts")
        return cls(**{k: data[k] for k in known if data.get(k) is not None})  # type: ignore[arg-type]

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
