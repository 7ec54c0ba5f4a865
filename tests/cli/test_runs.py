"""`lemon runs`: list, filter and delete the runs of a real SQLite results store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from lemon.evaluation.store import ItemRow, ResultsStore
from tests.cli.test_cli_core import assert_clean_error, lemon


def _store(path: Path) -> dict[str, str]:
    """Three runs (gsm8k cot, gsm8k vanilla, multiarith cot), two items each, with traces and an attribution."""
    ids = {}
    with ResultsStore(path) as db:
        for bench, method in (("gsm8k", "cot"), ("gsm8k", "vanilla"), ("multiarith", "cot")):
            run_id = f"{bench[:4]}{method}".ljust(16, "0")
            db.ensure_run(run_id, benchmark=bench, split="test", method=method, pool="cpu", level="medium",
                          seeds=1, n_items=2, config={})
            for i in range(2):
                db.put(run_id, ItemRow(item_id=f"{bench}/{i}", seed=0, prediction="4", gold="4", correct=True,
                                       tokens={}, total_tokens=10, latency_s=0.1, trace_id=None, status="ok",
                                       trace_json='{"events": []}'))
            db.put_explanation(run_id, f"{bench}/0", 0, {"edits": []})
            ids[f"{bench} {method}"] = run_id
    return ids


def _count(path: Path, table: str) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        db.close()


def test_delete_run_removes_the_run_and_everything_stored_with_it(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    ids = _store(path)
    with ResultsStore(path) as db:
        db.claim(ids["gsm8k cot"], "gsm8k/9", 0, "host:1:x")
        assert db.delete_run(ids["gsm8k cot"]) == 2
        assert db.run(ids["gsm8k cot"]) is None and db.count(ids["gsm8k cot"]) == 0
        assert db.count(ids["gsm8k vanilla"]) == 2  # the others are untouched
    for table, left in (("runs", 2), ("items", 4), ("traces", 4), ("explanations", 2), ("claims", 0)):
        assert _count(path, table) == left, table


def test_runs_lists_and_filters(tmp_path: Path, _isolated_home: Path) -> None:
    path = tmp_path / "r.sqlite"
    ids = _store(path)
    every = lemon("runs", "--store", str(path), home=_isolated_home)
    assert every.returncode == 0, every.stderr
    assert "3 run(s)" in every.stdout and all(run_id in every.stdout for run_id in ids.values())
    cot = lemon("runs", "list", "--store", str(path), "--method", "cot", "--benchmark", "gsm8k", home=_isolated_home)
    assert cot.returncode == 0 and "1 run(s)" in cot.stdout and ids["gsm8k cot"] in cot.stdout
    assert ids["gsm8k vanilla"] not in cot.stdout and "2/2" in cot.stdout


def test_runs_delete_asks_for_yes(tmp_path: Path, _isolated_home: Path) -> None:
    path = tmp_path / "r.sqlite"
    ids = _store(path)
    asked = lemon("runs", "delete", "--store", str(path), "--benchmark", "gsm8k", home=_isolated_home)
    assert_clean_error(asked, "2 run(s) with 4 item(s) would be deleted")
    assert _count(path, "runs") == 3 and _count(path, "items") == 6  # nothing went
    assert_clean_error(lemon("runs", "delete", "--store", str(path), home=_isolated_home), "name the runs to delete")
    assert_clean_error(lemon("runs", "delete", "nope", "--store", str(path), home=_isolated_home), "no run 'nope'")
    done = lemon("runs", "delete", ids["gsm8k cot"][:6], "--store", str(path), "--yes", home=_isolated_home)
    assert done.returncode == 0 and "deleted 1 run(s) and 2 item(s)" in " ".join(done.stdout.split())
    assert _count(path, "runs") == 2 and _count(path, "traces") == 4


def test_runs_on_a_missing_store_is_one_line(tmp_path: Path, _isolated_home: Path) -> None:
    assert_clean_error(lemon("runs", "--store", str(tmp_path / "none.sqlite"), home=_isolated_home),
                       "no results store at")
