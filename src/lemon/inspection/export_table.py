"""A flat table of results for pandas users: one CSV row per (run, item, seed), no SQL needed."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path

from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.inspection.itemview import shown_status

COLUMNS = ("run_id", "benchmark", "split", "method", "pool", "level", "temperature", "item_id", "seed", "correct",
           "prediction", "gold", "status", "stop_reason", "total_tokens", "prompt_tokens", "completion_tokens",
           "orchestrator_tokens", "n_agents", "cached_agents", "tokens_by_level", "latency_s")


def csv_status(r: ItemRow) -> str:
    """The status as the viewer reads it, as one token: a run that ended without an extractable answer is
    `no_answer`, not `ok` (a pandas filter on status == "ok" must not count it as answered)."""
    return shown_status(r.status, r.prediction).replace(" ", "_")


def _row(run: RunInfo, r: ItemRow) -> dict[str, object]:
    agents = r.tokens.values()
    by_level: dict[str, int] = {}
    for t in agents:
        level = str(t.get("capacity", ""))
        by_level[level] = by_level.get(level, 0) + int(t.get("prompt", 0)) + int(t.get("completion", 0))
    return {"run_id": run.run_id, "benchmark": run.benchmark, "split": run.split, "method": run.method,
            "pool": run.pool, "level": run.level, "temperature": run.config.get("temperature"),
            "item_id": r.item_id, "seed": r.seed, "correct": int(r.correct), "prediction": r.prediction,
            "gold": r.gold, "status": csv_status(r), "stop_reason": r.stop_reason, "total_tokens": r.total_tokens,
            "prompt_tokens": sum(int(t.get("prompt", 0)) for t in agents),
            "completion_tokens": sum(int(t.get("completion", 0)) for t in agents),
            "orchestrator_tokens": r.orchestrator_tokens, "n_agents": len(r.tokens),
            "cached_agents": sum(1 for t in agents if t.get("cached")),
            "tokens_by_level": json.dumps(by_level, sort_keys=True), "latency_s": round(r.latency_s, 4)}


def results_csv(db: ResultsStore, runs: Sequence[RunInfo]) -> tuple[str, int]:
    """(CSV text, rows) of the given runs, in run then (seed, insertion) order."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    n = 0
    for run in runs:
        for r in db.items(run.run_id):
            writer.writerow(_row(run, r))
            n += 1
    return buf.getvalue(), n


def write_results_csv(db: ResultsStore, runs: Sequence[RunInfo], out: Path) -> int:
    from lemon.files import write_output

    text, n = results_csv(db, runs)
    write_output(out, text, what="the CSV table")
    return n
