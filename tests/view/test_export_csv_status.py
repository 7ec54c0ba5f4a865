"""The CSV export's status column says when an item ended without an extracted answer (issue 23 leftover)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from lemon.evaluation.store import ItemRow, ResultsStore
from lemon.inspection.export_table import results_csv


def _row(item_id: str, prediction: str | None, status: str) -> ItemRow:
    return ItemRow(item_id=item_id, seed=0, prediction=prediction, gold="4", correct=prediction == "4",
                   tokens={}, total_tokens=10, latency_s=0.1, trace_id=None, status=status)


def test_an_item_without_an_extracted_answer_is_no_answer_not_ok(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as db:
        run = db.ensure_run("r1", benchmark="gsm8k", split="test", method="cot", pool="tiny", level="medium",
                            seeds=1, n_items=3, config={})
        db.put("r1", _row("answered", "4", "ok"))
        db.put("r1", _row("silent", None, "ok"))
        db.put("r1", _row("failed", None, "error"))
        text, n = results_csv(db, [run])
    status = {r["item_id"]: r["status"] for r in csv.DictReader(io.StringIO(text))}
    assert n == 3
    assert status == {"answered": "ok", "silent": "no_answer", "failed": "error"}
