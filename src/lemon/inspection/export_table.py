"""A flat table of results for pandas users: one CSV row per (run, item, seed), no SQL needed.

The table is opened in spreadsheets too, and its text cells hold model output (the prediction) and benchmark
data: a cell a spreadsheet would run as a formula is written inert (`inert_cell`). A run without a gold answer
(`lemon run`) is unscored: its `correct` cell is empty, not 0.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path

from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.inspection.itemview import shown_status

COLUMNS = ("run_id", "benchmark", "split", "method", "pool", "level", "temperature", "item_id", "seed", "correct",
           "prediction", "gold", "status", "stop_reason", "total_tokens", "prompt_tokens", "completion_tokens",
           "orchestrator_tokens", "n_agents", "cached_agents", "tokens_by_level", "latency_s")


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def inert_cell(value: object) -> object:
    """`value` as a spreadsheet reads it without running anything (OWASP's CSV injection advice): text that
    starts with = + - @, a tab or a carriage return gets a leading single quote, so `=HYPERLINK(...)` written by
    a model is shown as text. A plain number such as `-3` or `+2.5e3` is left as it is: a spreadsheet parses it
    as a number, never as a formula (it has no operator, reference or call to run), while the quote would turn
    a right answer of -3 into the text '-3, unequal to the gold answer and lost to sums in pandas. Non-text
    values (ints, floats, None) are never formulas."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


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
            "item_id": r.item_id, "seed": r.seed, "correct": "" if r.gold is None else int(r.correct),  # unscored
            "prediction": r.prediction, "gold": r.gold, "status": csv_status(r), "stop_reason": r.stop_reason,
            "total_tokens": r.total_tokens,
            "prompt_tokens": sum(int(t.get("prompt", 0)) for t in agents),
            "completion_tokens": sum(int(t.get("completion", 0)) for t in agents),
            "orchestrator_tokens": r.orchestrator_tokens, "n_agents": len(r.tokens),
            "cached_agents": sum(1 for t in agents if t.get("cached")),
            "tokens_by_level": json.dumps(by_level, sort_keys=True), "latency_s": round(r.latency_s, 4)}


def results_csv(db: ResultsStore, runs: Sequence[RunInfo]) -> tuple[str, int]:
    """(CSV text, rows) of the given runs, in run then (seed, insertion) order."""
    buf = io.StringIO()
    # RFC 4180's CRLF: the csv module quotes a cell holding any character of the line terminator, so a carriage
    # return in model output is quoted too (with "\n" alone it was not, and pandas and spreadsheets split the
    # row there, starting a new row with whatever the model wrote after it).
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    n = 0
    for run in runs:
        for r in db.items(run.run_id):
            writer.writerow({k: inert_cell(v) for k, v in _row(run, r).items()})
            n += 1
    return buf.getvalue(), n


def write_results_csv(db: ResultsStore, runs: Sequence[RunInfo], out: Path) -> int:
    from lemon.files import write_output

    text, n = results_csv(db, runs)
    write_output(out, text, what="the CSV table")
    return n
