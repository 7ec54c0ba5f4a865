"""An evaluation run as an Inspect (inspect_ai) eval log, written through inspect_ai's own log API.

So `inspect view` opens LEMON runs next to a lab's other evaluations: one sample per (item, seed) (epoch =
seed + 1), the task text as input, the gold answer as target, the output agent's text as output, a `correct`
score (1/0, with the extracted prediction as the answer) where there is a gold answer and no score where there
is none (a `lemon run` is unscored, not wrong: Inspect counts it in `unscored_samples` and leaves it out of the
accuracy), and model usage per model id (as Inspect keys it) for each sample and for the whole run. Each
sample's transcript holds the agents as events: a span per agent (type `agent`, in the order they ran) holding
its model call (a ModelEvent with the exact messages it was sent and its output, `cache="read"` when a cache
answered it) or, for a vote, its tally; the orchestrator's spec and any stop rule's decision are info events.
inspect_ai is imported here only, so the rest of LEMON never needs it.
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lemon.errors import LemonError, StorageError
from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.files import disk_full, write_output
from lemon.runtime.trace import Trace


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def _usage(rows_tokens: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens per model id, as Inspect keys `model_usage` (a vote calls no model: not a key); a record written
    before agents' models were stored falls back to `lemon/<level>`."""
    from inspect_ai.model import ModelUsage

    acc: dict[str, list[int]] = {}
    for tokens in rows_tokens:
        for t in tokens.values():
            if t.get("model") == "vote":
                continue
            u = acc.setdefault(str(t.get("model") or f"lemon/{t.get('capacity', 'unknown')}"), [0, 0])
            u[0] += int(t.get("prompt", 0))
            u[1] += int(t.get("completion", 0))
    return {k: ModelUsage(input_tokens=i, output_tokens=o, total_tokens=i + o) for k, (i, o) in sorted(acc.items())}


def _at(started: float, t: float | None) -> datetime:
    return datetime.fromtimestamp(started + (t or 0.0), UTC)


def _model_event(a: Any, started: float, config: Any) -> Any:
    """One agent's model call as Inspect records one: the messages it was sent, its output and usage."""
    from inspect_ai.event import ModelEvent
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser, ModelOutput, ModelUsage

    kinds = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}
    messages = [kinds.get(m["role"], ChatMessageUser)(content=m["content"]) for m in a.prompt or ()]
    output = ModelOutput.from_content(model=a.model, content=a.output or "")
    prompt, completion = int(a.prompt_tokens or 0), int(a.completion_tokens or 0)
    output.usage = ModelUsage(input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion)
    sent = a.sent_s if a.sent_s is not None else a.start_s
    return ModelEvent(model=a.model, role=a.name, input=messages, tools=[], tool_choice="none", config=config,
                      output=output, cache="read" if a.cached else None, span_id=f"agent-{a.name}",
                      timestamp=_at(started, sent), working_start=sent or 0.0, completed=_at(started, a.end_s),
                      working_time=a.latency_s, metadata={"capacity": a.capacity, "queued_s": a.queued_s})


def _agent_events(a: Any, started: float, config: Any) -> list[Any]:
    """A span per agent that ran (its model call or its tally inside); one info event for one that did not."""
    from inspect_ai.event import InfoEvent, SpanBeginEvent, SpanEndEvent

    from lemon.inspection.itemview import vote_tally

    if not a.ran:
        return [InfoEvent(source=a.name, data={"agent": a.name, "not_run": a.note or "not run"},
                          timestamp=_at(started, 0.0), working_start=0.0)]
    sid = f"agent-{a.name}"
    meta = {"role": a.role, "capacity": a.capacity, "duty": a.duty, "depends_on": list(a.depends_on),
            "cache_hit": bool(a.cached)}
    out: list[Any] = [SpanBeginEvent(id=sid, name=a.name, type="agent", metadata=meta,
                                     timestamp=_at(started, a.start_s), working_start=a.start_s or 0.0)]
    if a.votes is not None:
        tally = [{"answer": answer, "voters": voters} for answer, voters in vote_tally(a.votes)]
        out.append(InfoEvent(source=a.name, data={"tally": tally, "output": a.output}, span_id=sid,
                             timestamp=_at(started, a.end_s), working_start=a.end_s or 0.0))
    elif a.model and a.model != "vote":
        out.append(_model_event(a, started, config))
    out.append(SpanEndEvent(id=sid, span_id=sid, timestamp=_at(started, a.end_s), working_start=a.end_s or 0.0))
    return out


def sample_events(run: RunInfo, trace: Trace, started: float) -> list[Any]:
    """The sample's transcript: the orchestrator's spec, each agent in the order it started, stop rules."""
    from inspect_ai.event import InfoEvent
    from inspect_ai.model import GenerateConfig

    from lemon.inspection.itemview import agent_records, orchestrator_event, stop_rule_events

    config = GenerateConfig(temperature=run.temperature, max_tokens=run.max_tokens)
    events: list[Any] = []
    orch = orchestrator_event(trace)
    if orch is not None:
        events.append(InfoEvent(source="orchestrator", timestamp=_at(started, orch.get("t")),
                                data={k: orch.get(k) for k in ("source", "tokens", "warnings", "raw")}))
    agents = sorted(agent_records(trace), key=lambda a: (a.start_s is None, a.start_s or 0.0))
    for a in agents:
        events += _agent_events(a, started, config)
    for e in stop_rule_events(trace):
        events.append(InfoEvent(source="stop_rule", data={k: v for k, v in e.items() if k != "id"},
                                timestamp=_at(started, e.get("t"))))
    return events


def _sample(run: RunInfo, row: ItemRow, trace: Trace | None) -> Any:
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput
    from inspect_ai.scorer import Score

    task = (trace.task if trace else None) or f"(task text not recorded; item {row.item_id})"
    output_agent = str(trace.topology.get("output", "")) if trace else ""
    answer = trace.contents.get(output_agent, "") if trace and row.status == "ok" else ""
    return EvalSample(
        id=row.item_id, epoch=row.seed + 1, input=task, target=row.gold or "",
        messages=[ChatMessageUser(content=task), ChatMessageAssistant(content=answer or f"({row.status})")],
        output=ModelOutput.from_content(model=f"lemon/{run.method}", content=answer),
        scores=None if row.gold is None else {"correct": Score(
            value=1.0 if row.correct else 0.0, answer=row.prediction,
            explanation=f"status {row.status}: {row.stop_reason or ''}".strip())},
        metadata={"run_id": run.run_id, "seed": row.seed, "status": row.status, "stop_reason": row.stop_reason,
                  "total_tokens": row.total_tokens, "orchestrator_tokens": row.orchestrator_tokens,
                  "tokens_by_agent": json.loads(json.dumps(row.tokens, default=str))},
        model_usage=_usage([row.tokens]), total_time=row.latency_s,
        started_at=_iso(row.created - row.latency_s), completed_at=_iso(row.created),
        events=sample_events(run, trace, row.created - row.latency_s) if trace else [])


def inspect_log(db: ResultsStore, run: RunInfo) -> Any:
    """The run as an `inspect_ai.log.EvalLog` (in memory)."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalMetric, EvalResults, EvalScore, EvalSpec, EvalStats

    rows = db.items(run.run_id)
    if not rows:
        raise LemonError(f"run {run.run_id} has no stored items to export")
    traces = db.traces(run.run_id, [(r.item_id, r.seed) for r in rows])
    samples = [_sample(run, r, traces.get((r.item_id, r.seed))) for r in rows]
    ids = list(dict.fromkeys(r.item_id for r in rows))
    spec = EvalSpec(created=_iso(run.created), task=f"lemon/{run.benchmark}", task_id=run.run_id,
                    run_id=run.run_id, dataset=EvalDataset(name=f"{run.benchmark}/{run.split}", samples=len(ids),
                                                           sample_ids=ids),
                    model=f"lemon/{run.method}", config=EvalConfig(epochs=max(r.seed for r in rows) + 1),
                    metadata={"pool": run.pool, "level": run.level, "config": run.config})
    scored = [r for r in rows if r.gold is not None]
    results = EvalResults(total_samples=len(rows), completed_samples=len(rows), scores=[
        EvalScore(name="correct", scorer="lemon", scored_samples=len(scored), unscored_samples=len(rows) - len(scored),
                  metrics={"accuracy": EvalMetric(name="accuracy", value=sum(r.correct for r in scored) / len(scored))})
    ] if scored else [])
    stats = EvalStats(started_at=_iso(min(r.created - r.latency_s for r in rows)),
                      completed_at=_iso(max(r.created for r in rows)), model_usage=_usage([r.tokens for r in rows]))
    return EvalLog(status="success", eval=spec, results=results, stats=stats, samples=samples)


def write_inspect_log(db: ResultsStore, run: RunInfo, out: Path) -> int:
    """Write the run's Inspect log to `out` (.eval or .json), atomically; returns the number of samples."""
    try:
        from inspect_ai.log import write_eval_log
    except ImportError:
        raise LemonError("exporting to Inspect needs inspect_ai: pip install -e '.[export]'") from None
    if out.suffix not in (".eval", ".json"):
        raise LemonError(f"{out}: an Inspect log file ends in .eval or .json; name it e.g. run.eval")
    log = inspect_log(db, run)
    write_output(out, _log_bytes(log, out.suffix, write_eval_log), what="the Inspect log")
    return len(log.samples or [])


def _log_bytes(log: Any, suffix: str, write_eval_log: Any) -> bytes:
    """The log as inspect_ai writes it (it writes only to a path), staged in a temporary folder so that the
    one writer puts it at the user's path: a device, a FIFO or a full disk handled as for every other file."""
    folder = Path(tempfile.gettempdir())
    try:
        with tempfile.TemporaryDirectory(prefix="lemon-inspect-") as staging:
            staged = Path(staging) / f"log{suffix}"
            write_eval_log(log, str(staged), format=suffix.lstrip("."))
            return staged.read_bytes()
    except OSError as exc:
        reason = "the disk is full" if disk_full(folder, exc) else (exc.strerror or str(exc))
        raise StorageError(f"cannot stage the Inspect log in the temporary folder {folder} ({reason}); free "
                           "space there or set TMPDIR to another folder") from None
