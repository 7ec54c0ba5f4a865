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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lemon.files import write_atomic

EVENT_TYPES = frozenset({"orchestrator_decision", "spawn", "despawn", "message", "tool_call", "tool_result",
                         "return", "aggregate", "human_intervention", "safety_event", "stop"})
EDGE_TYPES = frozenset({"temporal", "causal", "spawn", "message", "tool_dependency", "return", "aggregate",
                        "safety_flow"})


@dataclass
class Trace:
    task_id: str | None = None
    trace_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    events: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, str]] = field(default_factory=list)
    rewards: dict[str, float] = field(default_factory=dict)
    costs: dict[str, Any] = field(default_factory=dict)
    system: dict[str, Any] = field(default_factory=dict)
    topology: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    contents: dict[str, str] = field(default_factory=dict)
    # What a person needs to read a run without the benchmark files: the task text and each agent's messages
    # ({agent: [{"role", "content"}, ...]}, exactly what its model was sent). Traces stored before these
    # fields existed load with them empty (`from_json`).
    task: str | None = None
    prompts: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    _t0: float = field(default_factory=time.perf_counter, repr=False)

    def event(self, type_: str, agent: str, **extra: Any) -> dict[str, Any]:
        """Append an event (ids are `e<index>`, `t` is seconds since the run started) and return it."""
        if type_ not in EVENT_TYPES:
            raise ValueError(f"unknown trace event type {type_!r}")
        ev = {"id": f"e{len(self.events)}", "t": round(time.perf_counter() - self._t0, 6), "type": type_,
              "agent": agent, **{k: v for k, v in extra.items() if v is not None}}
        self.events.append(ev)
        return ev

    def edge(self, src: dict[str, Any] | str, dst: dict[str, Any] | str, type_: str) -> None:
        if type_ not in EDGE_TYPES:
            raise ValueError(f"unknown trace edge type {type_!r}")
        s = src["id"] if isinstance(src, dict) else src
        d = dst["id"] if isinstance(dst, dict) else dst
        self.edges.append({"src": s, "dst": d, "type": type_})

    def to_json(self) -> dict[str, Any]:
        return {"trace_id": self.trace_id, "task_id": self.task_id, "system": self.system,
                "topology": self.topology, "events": self.events, "edges": self.edges, "rewards": self.rewards,
                "costs": self.costs, "metrics": self.metrics, "contents": self.contents, "task": self.task,
                "prompts": self.prompts}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trace:
        """A trace from its JSON form; fields absent from traces of older versions get their defaults."""
        known = ("task_id", "trace_id", "events", "edges", "rewards", "costs", "system", "topology", "metrics",
                 "contents", "task", "prompts")
        return cls(**{k: data[k] for k in known if data.get(k) is not None})

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the trace as JSON atomically: a crash never leaves half a file, and a write that fails (a
        full disk) leaves no temporary file behind either (`lemon.files.write_atomic`)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(p, json.dumps(self.to_json(), ensure_ascii=False, indent=1))
