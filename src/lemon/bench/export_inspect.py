"""An evaluation run as an Inspect (inspect_ai) eval log, written through inspect_ai's own log API.

So `inspect view` opens LEMON runs next to a lab's other evaluations: one sample per (item, seed) (epoch =
seed + 1), the task text as input, the gold answer as target, the output agent's text as output, a `correct`
score (1/0, with the extracted prediction as the answer), and model usage per capacity level (`lemon/<level>`)
for each sample and for the whole run. inspect_ai is imported here only, so the rest of LEMON never needs it.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lemon.bench.store import ItemRow, ResultsStore, RunInfo
from lemon.errors import LemonError


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def _usage(rows_tokens: list[dict[str, Any]]) -> dict[str, Any]:
    from inspect_ai.model import ModelUsage

    acc: dict[str, list[int]] = {}
    for tokens in rows_tokens:
        for t in tokens.values():
            u = acc.setdefault(f"lemon/{t.get('capacity', 'unknown')}", [0, 0])
            u[0] += int(t.get("prompt", 0))
            u[1] += int(t.get("completion", 0))
    return {k: ModelUsage(input_tokens=i, output_tokens=o, total_tokens=i + o) for k, (i, o) in sorted(acc.items())}


def _sample(run: RunInfo, row: ItemRow, trace: dict[str, Any] | None) -> Any:
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput
    from inspect_ai.scorer import Score

    trace = trace or {}
    task = trace.get("task") or f"(task text not recorded; item {row.item_id})"
    output_agent = str((trace.get("topology") or {}).get("output", ""))
    answer = (trace.get("contents") or {}).get(output_agent, "") if row.status == "ok" else ""
    return EvalSample(
        id=row.item_id, epoch=row.seed + 1, input=task, target=row.gold or "",
        messages=[ChatMessageUser(content=task), ChatMessageAssistant(content=answer or f"({row.status})")],
        output=ModelOutput.from_content(model=f"lemon/{run.method}", content=answer),
        scores={"correct": Score(value=1.0 if row.correct else 0.0, answer=row.prediction,
                                 explanation=f"status {row.status}: {row.stop_reason or ''}".strip())},
        metadata={"run_id": run.run_id, "seed": row.seed, "status": row.status, "stop_reason": row.stop_reason,
                  "total_tokens": row.total_tokens, "orchestrator_tokens": row.orchestrator_tokens,
                  "tokens_by_agent": json.loads(json.dumps(row.tokens, default=str))},
        model_usage=_usage([row.tokens]), total_time=row.latency_s,
        started_at=_iso(row.created - row.latency_s), completed_at=_iso(row.created))


def inspect_log(db: ResultsStore, run: RunInfo) -> Any:
    """The run as an `inspect_ai.log.EvalLog` (in memory)."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalMetric, EvalResults, EvalScore, EvalSpec, EvalStats

    rows = db.items(run.run_id)
    if not rows:
        raise LemonError(f"run {run.run_id} has no stored items to export")
    traces = db.traces(run.run_id, [(r.item_id, r.seed) for r in rows])
    samples = [_sample(run, r, json.loads(traces[(r.item_id, r.seed)]) if (r.item_id, r.seed) in traces else None)
               for r in rows]
    accuracy = sum(r.correct for r in rows) / len(rows)
    ids = list(dict.fromkeys(r.item_id for r in rows))
    spec = EvalSpec(created=_iso(run.created), task=f"lemon/{run.benchmark}", task_id=run.run_id,
                    run_id=run.run_id, dataset=EvalDataset(name=f"{run.benchmark}/{run.split}", samples=len(ids),
                                                           sample_ids=ids),
                    model=f"lemon/{run.method}", config=EvalConfig(epochs=max(r.seed for r in rows) + 1),
                    metadata={"pool": run.pool, "level": run.level, "config": run.config})
    results = EvalResults(total_samples=len(rows), completed_samples=len(rows), scores=[
        EvalScore(name="correct", scorer="lemon", scored_samples=len(rows),
                  metrics={"accuracy": EvalMetric(name="accuracy", value=accuracy)})])
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
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp{out.suffix}")
    try:
        write_eval_log(log, str(tmp), format=out.suffix.lstrip("."))  # type: ignore[arg-type]
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return len(log.samples or [])
