"""One stored (run, item, seed) as a person reads it: the row, the trace, and one record per agent.

`lemon trace`, `lemon view` and the exports all read items through here, so they agree on what an agent's
tokens, model, latency or cache hit are, and so traces written before a field existed (no task text, no
prompts, no prompt/completion split on the return event) still load: missing fields come back as None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from lemon.errors import LemonError
from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.runtime.trace import AgentTokens, System, Trace, TraceEvent


@dataclass(frozen=True)
class AgentRecord:
    """Everything the trace says about one agent of the spec (live or not)."""

    name: str
    role: str
    duty: str
    capacity: str
    depends_on: tuple[str, ...]
    live: bool                                  # it reaches the output agent, so it ran (or would have)
    ran: bool                                   # a `return` event exists
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tokens: int | None = None
    cached: bool | None = None
    start_s: float | None = None                # seconds since the run started (spawn event)
    end_s: float | None = None                  # (return event)
    sent_s: float | None = None                 # when its call left the level's queue (return event's `sent`)
    prompt: tuple[dict[str, str], ...] | None = None
    output: str | None = None
    note: str | None = None                     # e.g. why it did not run
    votes: dict[str, str | None] | None = None  # a vote agent: each voter's extracted answer
    unrun: bool = False                         # needed, but a stop rule fired before it was
    # The call's sampling settings (temperature, max_tokens, top_p, seed); a trace written before they were
    # recorded per call gives only the run's temperature and max_tokens.
    params: dict[str, float | int | None] | None = None

    @property
    def cut(self) -> bool:
        """The reply stopped at its `max_tokens`: cut mid-answer, most likely (a reply of exactly that length
        reads the same)."""
        limit = (self.params or {}).get("max_tokens")
        return self.completion_tokens is not None and isinstance(limit, int) and self.completion_tokens >= limit

    @property
    def latency_s(self) -> float | None:
        """Seconds on the model (from leaving the queue to the answer); spawn to answer in older traces."""
        begin = self.sent_s if self.sent_s is not None else self.start_s
        return None if begin is None or self.end_s is None else round(self.end_s - begin, 6)

    @property
    def queued_s(self) -> float | None:
        """Seconds waiting for a free slot of its level (and its budget) before the call was sent."""
        return None if self.sent_s is None or self.start_s is None else round(self.sent_s - self.start_s, 6)

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["depends_on"] = list(self.depends_on)
        d["prompt"] = list(self.prompt) if self.prompt is not None else None
        d["latency_s"], d["queued_s"], d["cut"] = self.latency_s, self.queued_s, self.cut
        return d


#: An event with no fields: what a reader gets where the trace records none (an agent that never returned, a run
#: without a final stop); every reader only asks it `.get`, which answers None.
_SILENT = cast(TraceEvent, {})


def _by_agent(events: Sequence[TraceEvent], type_: str) -> dict[str, TraceEvent]:
    return {str(e.get("agent")): e for e in events if e.get("type") == type_}


def agent_records(trace: Trace) -> list[AgentRecord]:
    """The agents of the trace's spec in spec order, with what each did (None where the trace is silent)."""
    topo, metrics, events = trace.topology, trace.metrics, trace.events
    spawns, returns, despawns = (_by_agent(events, t) for t in ("spawn", "return", "despawn"))
    unrun = set(metrics.get("unrun_agents") or ())
    skipped = (set(metrics.get("skipped_agents") or ()) | set(despawns)) - unrun
    by_agent_tokens = metrics.get("tokens_by_agent") or {}
    models = trace.system.get("models") or {}
    out: list[AgentRecord] = []
    for a in topo.get("agents") or []:
        name = str(a["name"])
        ret = returns.get(name) or _SILENT
        tok: AgentTokens | dict[str, object] = by_agent_tokens.get(name) or {}
        note = (despawns.get(name) or _SILENT).get("reason") if name in skipped | unrun else None
        if note is None and not ret and name not in skipped:
            note = "did not run (the run stopped first)"
        prompt = trace.prompts.get(name)
        out.append(AgentRecord(
            name=name, role=str(a.get("role", "")), duty=str(a.get("duty") or ""),
            capacity=str(a.get("capacity", "")), depends_on=tuple(a.get("depends_on") or ()),
            live=name not in skipped, ran=bool(ret), model=_model(ret, tok, models, a.get("capacity")),
            prompt_tokens=_int(ret.get("prompt_tokens", tok.get("prompt"))),
            completion_tokens=_int(ret.get("completion_tokens", tok.get("completion"))),
            tokens=_int(ret.get("tokens")), cached=ret.get("cached"),
            start_s=(spawns.get(name) or _SILENT).get("t"), end_s=ret.get("t"), sent_s=ret.get("sent"),
            prompt=tuple(prompt) if prompt is not None else None, output=trace.contents.get(name), note=note,
            votes=ret.get("votes"), unrun=name in unrun, params=_params(ret, trace.system)))
    return out


def _model(ret: TraceEvent, tok: Mapping[str, object], models: Mapping[str, str], capacity: str | None) -> str | None:
    """The model that answered: the return event's, else the run's tokens record's, else the level's."""
    found = ret.get("model") or tok.get("model") or (models.get(capacity) if capacity is not None else None)
    return None if found is None else str(found)


def _params(ret: TraceEvent, system: System) -> dict[str, float | int | None] | None:
    """A model call's sampling settings: its return event's, else the run's (older traces); None for a vote or
    an agent that made no call."""
    if not ret or ret.get("votes") is not None or ret.get("model") == "vote":
        return None
    if isinstance(ret.get("params"), dict):
        return dict(ret["params"])
    run: dict[str, float | int | None] = {}
    if "temperature" in system:
        run["temperature"] = system["temperature"]
    if "max_tokens" in system:
        run["max_tokens"] = system["max_tokens"]
    return run or None


def vote_tally(votes: dict[str, str | None]) -> list[tuple[str | None, list[str]]]:
    """A vote's answers, most voters first (ties in voter order): (answer or None, [voters])."""
    groups: dict[str | None, list[str]] = {}
    for voter, answer in votes.items():
        groups.setdefault(answer, []).append(voter)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


def stop_rule_events(trace: Trace) -> list[TraceEvent]:
    """Each stop rule's decision (a `stop` event with reason stop_rule), before the run's own final stop."""
    return [e for e in trace.events if e.get("type") == "stop" and e.get("reason") == "stop_rule"]


def shown_status(status: str, prediction: str | None) -> str:
    """The status a person reads: a run that finished without an answer to extract is not simply "ok"."""
    return "no answer" if status == "ok" and prediction is None else status


def _int(value: object) -> int | None:
    """A count the trace records (a JSON number), None where it records none."""
    return int(value) if isinstance(value, int | float | str) else None


def stop_event(trace: Trace) -> TraceEvent:
    """The run's own final `stop` event (reason and detail), or an empty dict for a trace without one; a stop
    rule's earlier `stop` events are `stop_rule_events`."""
    stops = [e for e in trace.events if e.get("type") == "stop"]
    return stops[-1] if stops else _SILENT


def orchestrator_event(trace: Trace) -> TraceEvent | None:
    """How the spec was written (source, raw output, repairs/warnings), if an orchestrator wrote it."""
    return next((e for e in trace.events if e.get("type") == "orchestrator_decision"), None)


def resolve_item(db: ResultsStore, run: RunInfo, item_id: str, seed: int) -> ItemRow:
    """The stored row of (item, seed); a bare id such as `12` also matches `multiarith/12`."""
    rows = db.items(run.run_id)
    ids = {r.item_id for r in rows}
    candidates = [item_id, f"{run.benchmark}/{item_id}"]
    chosen = next((c for c in candidates if c in ids), None)
    if chosen is None:
        sample = ", ".join(sorted(ids)[:5]) or "none"
        raise LemonError(f"run {run.run_id} has no item {item_id!r} (e.g. {sample}); list them with "
                         f"`lemon trace {run.run_id}`")
    for r in rows:
        if r.item_id == chosen and r.seed == seed:
            return r
    seeds = sorted(r.seed for r in rows if r.item_id == chosen)
    raise LemonError(f"item {chosen} of run {run.run_id} has no seed {seed}; stored seeds: {seeds}")


def item_payload(run: RunInfo, row: ItemRow, trace: Trace | None) -> dict[str, object]:
    """The machine-readable form of one item (what `lemon trace --json` prints)."""
    return {"run": {"run_id": run.run_id, "benchmark": run.benchmark, "split": run.split, "method": run.method,
                    "pool": run.pool, "level": run.level},
            "item": {"item_id": row.item_id, "seed": row.seed, "prediction": row.prediction, "gold": row.gold,
                     "correct": row.correct, "status": row.status, "shown_status": shown_status(row.status,
                                                                                                row.prediction),
                     "stop_reason": row.stop_reason,
                     "total_tokens": row.total_tokens, "orchestrator_tokens": row.orchestrator_tokens,
                     "latency_s": row.latency_s},
            "agents": [a.to_json() for a in agent_records(trace)] if trace else [],
            "stop_rules": stop_rule_events(trace) if trace else [],
            "trace": trace.to_json() if trace else None}
