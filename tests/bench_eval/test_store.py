"""The results store: rows committed one by one, never counted twice, and resumable."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from lemon.bench.store import ItemRow, ResultsStore, default_store_path, make_run_id


def _row(item: str, seed: int = 0, correct: bool = True, status: str = "ok") -> ItemRow:
    return ItemRow(item_id=item, seed=seed, prediction="1", gold="1", correct=correct,
                   tokens={"solver": {"prompt": 3, "completion": 2, "capacity": "small"}}, total_tokens=5,
                   latency_s=0.1, trace_id="t", status=status)


def _run(store: ResultsStore, run_id: str = "r1", seeds: int = 2) -> None:
    store.ensure_run(run_id, benchmark="multiarith", split="test", method="vanilla", pool="tiny",
                     level="small", seeds=seeds, n_items=3, config={"temperature": 0.7})


def test_run_id_is_deterministic_and_sensitive() -> None:
    a = make_run_id(benchmark="gsm8k", split="test", method="cot", pool="cpu", level="medium", limit=10,
                    config={"temperature": 0.7})
    assert a == make_run_id(config={"temperature": 0.7}, limit=10, level="medium", pool="cpu", method="cot",
                            split="test", benchmark="gsm8k")
    assert a != make_run_id(benchmark="gsm8k", split="test", method="cot", pool="cpu", level="medium",
                            limit=11, config={"temperature": 0.7})


def test_default_path_is_under_lemon_home(_isolated_home: Path) -> None:
    assert default_store_path() == _isolated_home / "results.sqlite"


def test_insert_or_ignore_and_pending(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as store:
        _run(store)
        assert store.put("r1", _row("a"))
        assert not store.put("r1", _row("a", correct=False))  # same key: ignored, first result kept
        assert store.put("r1", _row("a", seed=1))
        keys = [(i, s) for s in range(2) for i in ("a", "b", "c")]
        assert store.pending_items("r1", keys) == [("b", 0), ("c", 0), ("b", 1), ("c", 1)]
        rows = store.items("r1")
        assert len(rows) == 2 and rows[0].correct is True and rows[0].tokens["solver"]["prompt"] == 3
        # widening seeds keeps the run and its rows
        _run(store, seeds=5)
        assert store.run("r1").seeds == 5 and store.count("r1") == 2  # type: ignore[union-attr]
        _run(store, seeds=1)
        assert store.run("r1").seeds == 5  # type: ignore[union-attr]


def test_wal_and_rows_visible_to_other_connections_immediately(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with ResultsStore(path) as store:
        _run(store)
        store.put("r1", _row("a"))
        other = sqlite3.connect(path)
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert other.execute("SELECT COUNT(*) FROM items").fetchone()[0] == 1
        other.close()


def test_crash_between_items_then_resume_counts_each_once(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    keys = [(i, s) for s in range(2) for i in ("a", "b", "c")]
    store = ResultsStore(path)
    _run(store)
    for k in store.pending_items("r1", keys)[:4]:
        store.put("r1", _row(*k))
    del store  # "crash": no close, no cleanup
    with ResultsStore(path) as again:
        _run(again)
        for k in again.pending_items("r1", keys):
            again.put("r1", _row(*k))
        for k in keys:  # a second full pass changes nothing
            again.put("r1", _row(*k, correct=False))
        rows = again.items("r1")
    assert sorted((r.item_id, r.seed) for r in rows) == sorted(keys)
    assert all(r.correct for r in rows)


def test_retry_errors_deletes_only_error_rows(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as store:
        _run(store)
        store.put("r1", _row("a", status="error", correct=False))
        store.put("r1", _row("b", status="budget_exceeded", correct=False))
        assert store.delete_errors("r1") == 1
        assert store.pending_items("r1", [("a", 0), ("b", 0)]) == [("a", 0)]
