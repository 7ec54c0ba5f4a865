"""`lemon runs delete --yes` while an evaluation of that run is going (issue 26, item 3).

Before: the evaluation went on storing rows without a run row, then died with an AssertionError traceback;
`lemon runs` could neither see nor delete those rows, and a later evaluation silently resumed from them. Now
the evaluation stops at its next result with one line and nothing is orphaned; rows orphaned by older
versions are shown and removable. Real processes, a real SQLite store; deterministic: the scripted workers
wait while a hold file exists, so the deletion always lands mid-run."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from lemon.errors import LemonError
from lemon.evaluation.store import ItemRow, ResultsStore
from tests.cli.test_cli_core import lemon
from tests.evaluation.test_cli import _cli, _env, _rows, _wait_for_rows, scripted_pool_yaml

TABLES = ("runs", "items", "traces", "claims")


def _counts(store: Path) -> dict[str, int]:
    db = sqlite3.connect(store)
    try:
        return {t: int(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in TABLES}
    finally:
        db.close()


def _wait_for_claim(store: Path) -> None:
    deadline = time.monotonic() + 120
    while _counts(store)["claims"] < 1:
        assert time.monotonic() < deadline, "the third item was never claimed"
        time.sleep(0.05)


def test_deleting_a_run_mid_evaluation_stops_it_with_one_line_and_orphans_nothing(
        tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    store, hold = tmp_path / "results.sqlite", tmp_path / "hold"
    hold.touch()
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", latency_s=0.0, hold=f"hold_file: '{hold}', hold_after_calls: 2")
    cmd = _cli("eval", "multiarith", "--method", "vanilla", "--pool", str(pool), "--level", "small", "--limit", "6",
               "--store", str(store), "--data-dir", str(data_dir), "--concurrency", "1", "--no-cache")
    proc = subprocess.Popen(cmd, env=_env(_isolated_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for_rows(proc, store, 2)  # two items stored; the third call waits on the hold file
        _wait_for_claim(store)  # ... holding its claim: the evaluation is visibly in progress
        deleted = lemon("runs", "delete", "--method", "vanilla", "--yes", "--store", str(store), home=_isolated_home)
        assert deleted.returncode == 0, deleted.stderr
        assert "is being evaluated" in deleted.stdout and "deleted 1 run(s) and 2 item(s)" in deleted.stdout
        hold.unlink()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = err.decode()
    assert proc.returncode == 2, stderr[-2000:]
    assert "Traceback" not in stderr and "AssertionError" not in stderr, stderr[-2000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "was deleted from" in errors[0] and "while this evaluation ran" in errors[0], stderr
    assert _counts(store) == {t: 0 for t in TABLES}  # old code: items and traces of a run that is gone
    listed = lemon("runs", "--store", str(store), home=_isolated_home)
    assert listed.returncode == 0 and "orphaned" not in listed.stderr


def _orphaned_store(path: Path) -> None:
    """What old code left: a kept run, and rows of a run id whose run row was deleted under the evaluation."""
    with ResultsStore(path) as db:
        for run_id in ("kept000000000000", "gone000000000000"):
            db.ensure_run(run_id, benchmark="gsm8k", split="test", method="cot", pool="cpu", level="medium",
                          seeds=1, n_items=3, config={})
            for i in range(3):
                db.put(run_id, ItemRow(item_id=f"gsm8k/{i}", seed=0, prediction="4", gold="4", correct=True,
                                       tokens={}, total_tokens=1, latency_s=0.1, trace_id=None, status="ok",
                                       trace_json="{}"))
    raw = sqlite3.connect(path)
    raw.execute("DELETE FROM runs WHERE run_id = 'gone000000000000'")
    raw.commit()
    raw.close()


def test_orphaned_rows_are_shown_and_can_be_deleted(tmp_path: Path, _isolated_home: Path) -> None:
    store = tmp_path / "r.sqlite"
    _orphaned_store(store)
    listed = lemon("runs", "--store", str(store), home=_isolated_home)
    assert listed.returncode == 0, listed.stderr
    said = " ".join(listed.stderr.split())
    assert "orphaned: 3 item row(s) of 1 deleted run(s) (gone000000000000)" in said
    assert "lemon runs delete --orphans --yes" in said
    asked = lemon("runs", "delete", "--orphans", "--store", str(store), home=_isolated_home)
    assert asked.returncode == 2 and "add --yes" in asked.stderr
    removed = lemon("runs", "delete", "--orphans", "--yes", "--store", str(store), home=_isolated_home)
    assert removed.returncode == 0 and "removed 3 orphaned item row(s)" in removed.stdout, removed.stderr
    assert _counts(store) == {"runs": 1, "items": 3, "traces": 3, "claims": 0}  # the kept run is untouched
    assert "orphaned" not in lemon("runs", "--store", str(store), home=_isolated_home).stderr


def test_a_row_for_a_deleted_run_is_refused_by_the_store(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as db:
        db.ensure_run("r" * 16, benchmark="b", split="s", method="m", pool="p", level="l", seeds=1, n_items=1,
                      config={})
        db.delete_run("r" * 16)
        row = ItemRow(item_id="x", seed=0, prediction=None, gold=None, correct=False, tokens={}, total_tokens=0,
                      latency_s=0.0, trace_id=None, status="ok", trace_json="{}")
        with pytest.raises(LemonError, match=r"was deleted from .* start the run anew"):
            db.put("r" * 16, row)
        with pytest.raises(LemonError, match="was deleted from"):
            db.claim("r" * 16, "x", 0, "h:1:t")
        assert db.orphans() == {}
    assert _rows(tmp_path / "r.sqlite") == []
