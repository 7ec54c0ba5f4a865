"""The results store: rows committed one by one, never counted twice, and resumable."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lemon.errors import StorageError
from lemon.evaluation.store import ItemRow, ResultsStore, default_store_path, make_run_id, new_claim_owner
from lemon.llm.cache import SQLiteCache


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


# ---- faults: one clear StorageError naming the file and the fix (issue 12) --------------------------------


def test_a_file_that_is_not_sqlite_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"
    path.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(StorageError, match="not a LEMON results store or is damaged") as err:
        ResultsStore(path)
    assert "mv " in str(err.value) and "\n" not in str(err.value)
    assert path.read_text().startswith("these are my notes")  # left as it was


def test_an_sqlite_file_of_another_program_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE items (sku TEXT, price REAL)")
    db.execute("INSERT INTO items VALUES ('x', 1.0)")
    db.commit()
    db.close()
    with pytest.raises(StorageError, match="another program"):
        ResultsStore(path)


def test_a_damaged_store_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with ResultsStore(path) as store:
        _run(store, seeds=1)
        for i in range(300):
            store.put("r1", ItemRow(item_id=f"i{i}", seed=0, prediction="1", gold="1", correct=True, tokens={},
                                    total_tokens=1, latency_s=0.1, trace_id="t", status="ok",
                                    trace_json='{"x": "' + "y" * 500 + '"}'))
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    for page in range(4096, len(data), 4096):  # every page but the schema's: garbage over the b-tree headers
        data[page + 8: page + 200] = bytes(range(192))
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="damaged") as err, ResultsStore(path) as store:
        store.items("r1")
    assert "\n" not in str(err.value)


def test_a_store_path_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match="cannot create the folder"):
        ResultsStore(blocker / "sub" / "r.sqlite")
    with pytest.raises(StorageError, match="is a folder"):
        ResultsStore(tmp_path)


# ---- claims: two processes on one run share the work -------------------------------------------------------


def test_a_claim_holds_off_other_live_processes_until_stored_or_released(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as a, ResultsStore(tmp_path / "r.sqlite") as b:
        _run(a)
        # Holders on other hosts: only their leases count (same-host liveness is the next test's).
        me, other = "host-a:1:aaaa", "host-b:1:bbbb"
        assert new_claim_owner().startswith(f"{socket.gethostname()}:{os.getpid()}:")
        assert b.claim("r1", "x", 0, other)
        assert not a.claim("r1", "x", 0, me)          # held by a live holder
        assert a.claim("r1", "y", 0, me)
        assert not b.claim("r1", "y", 0, other)
        assert a.claimed_by_others("r1", me) == 1
        b.put("r1", _row("x"))                        # storing drops the claim; a stored pair is never claimed
        assert not a.claim("r1", "x", 0, me) and a.claimed_by_others("r1", me) == 0
        assert a.release_claims(me) == 1 and b.claim("r1", "y", 0, other)


def test_an_expired_lease_or_a_dead_holder_frees_the_claim(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as store:
        _run(store)
        far = "otherhost:1:aaaa"
        assert store.claim("r1", "x", 0, far, lease_s=0.05)
        time.sleep(0.1)
        assert store.claim("r1", "x", 0, "otherhost:2:bbbb")   # the lease ran out
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
        gone = f"{socket.gethostname()}:{dead.stdout.strip()}:cccc"  # this host, a pid that has exited
        assert store.claim("r1", "y", 0, gone)
        assert store.claim("r1", "y", 0, "otherhost:3:dddd")   # a crashed holder on this host: free at once


def test_two_eval_processes_on_one_store_share_the_work(tmp_path: Path, data_dir: Path,
                                                        _isolated_home: Path) -> None:
    """Old behaviour: both processes computed every item (computed 12 + 12).

    Deterministic: the workers hold every call while `hold` exists; it is removed only once both processes
    hold a claim, so neither can finish the run alone (on a loaded machine the second one used to start late)."""
    from tests.evaluation.test_cli import scripted_pool_yaml

    hold = tmp_path / "hold"
    hold.touch()
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", latency_s=0.05, hold=f"hold_file: '{hold}'")
    store = tmp_path / "shared.sqlite"
    cmd = [sys.executable, "-m", "lemon.cli.main", "eval", "multiarith", "--method", "cot", "--limit", "12",
           "--pool", str(pool), "--store", str(store), "--concurrency", "2", "--data-dir", str(data_dir)]
    env = {**os.environ, "LEMON_HOME": str(_isolated_home), "COLUMNS": "200"}
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        _wait_for_claim_owners(store, 2, procs)
    finally:
        hold.unlink()
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-1500:] for o in outs]
    computed = [int(re.search(r"computed (\d+)", out).group(1)) for out, _ in outs]  # type: ignore[union-attr]
    assert sum(computed) == 12 and min(computed) > 0, computed
    with ResultsStore(store) as db:
        (run,) = db.runs()
        assert db.count(run.run_id) == 12
        assert db._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0  # all released or stored


def _wait_for_claim_owners(store: Path, n: int, procs: list[subprocess.Popen[str]]) -> None:
    """Until `n` distinct processes hold claims on `store` (each is then computing an item)."""
    deadline = time.monotonic() + 120
    while True:
        owners: set[str] = set()
        if store.exists():
            db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5)
            try:
                owners = {r[0] for r in db.execute("SELECT owner FROM claims")}
            except sqlite3.OperationalError:
                pass  # the schema is not written yet
            finally:
                db.close()
        if len(owners) >= n:
            return
        assert all(p.poll() is None for p in procs), _stopped_stderr(procs)
        assert time.monotonic() < deadline, (f"{len(owners)} of {n} processes claimed work within 120 s",
                                             _stopped_stderr(procs))
        time.sleep(0.05)


def _stopped_stderr(procs: list[subprocess.Popen[str]]) -> list[str]:
    """Each process's exit code and stderr tail, the ones still running killed first: reading a process that
    waits for the hold file would wait for ever (a failure here once hung the suite instead of failing)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    errs = [p.communicate(timeout=30)[1][-1500:] for p in procs]
    return [f"exit {p.returncode}: {err}" for p, err in zip(procs, errs, strict=True)]


# Each child opens a new file per round at the same instant as its siblings (a file barrier), writes one row
# and says "ok" or the one-line error; the parent releases a round only when all children are waiting on it.
# The same race for both SQLite files a process opens: the results store and the LLM cache.
_OPENER = """
import sys, time
from pathlib import Path
from lemon.errors import StorageError
from lemon.evaluation.store import ItemRow, ResultsStore
from lemon.llm.base import Completion
from lemon.llm.cache import SQLiteCache
folder, me, rounds, kind = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]

def store(r):
    with ResultsStore(folder / f"store-{r}.sqlite") as store:
        store.ensure_run("r", benchmark="b", split="s", method="m", pool="p", level="l", seeds=1,
                         n_items=1, config={})
        store.put("r", ItemRow(item_id=me, seed=0, prediction="1", gold="1", correct=True, tokens={},
                               total_tokens=1, latency_s=0.0, trace_id="t", status="ok"))

def cache(r):
    c = SQLiteCache(folder / f"cache-{r}.sqlite")
    c.put(me, Completion("1", 1, 1, 0.0, "m"))
    assert c.get(me) == ("1", 1, 1)

for r in range(rounds):
    (folder / f"ready-{r}-{me}").touch()
    while not (folder / f"go-{r}").exists():
        time.sleep(0.0005)
    try:
        {"store": store, "cache": cache}[kind](r)
        print(f"{r} ok", flush=True)
    except StorageError as exc:
        print(f"{r} error {exc}", flush=True)
"""


def _cpu_burners(n: int) -> list[subprocess.Popen[bytes]]:
    """Busy processes that end by themselves (60 s) if the test dies before it kills them."""
    code = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


@pytest.mark.parametrize("kind", ["store", "cache"])
def test_four_processes_starting_at_once_on_a_new_file_never_see_locked(tmp_path: Path, kind: str) -> None:
    """Old behaviour: "database is locked" at open (the WAL switch and schema creation raced) under load: the
    store's until issue 19, the LLM cache's until 2026-11-28 (it failed two `lemon eval` started together)."""
    rounds, n = 20, 4
    burners = _cpu_burners(2)
    procs = [subprocess.Popen([sys.executable, "-c", _OPENER, str(tmp_path), str(i), str(rounds), kind],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    try:
        for r in range(rounds):
            deadline = time.monotonic() + 60
            while len(list(tmp_path.glob(f"ready-{r}-*"))) < n:
                assert all(p.poll() is None for p in procs), _stopped_stderr(procs)
                assert time.monotonic() < deadline, f"round {r}: children not ready within 60 s"
                time.sleep(0.001)
            (tmp_path / f"go-{r}").touch()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in [*procs, *burners]:
            if p.poll() is None:
                p.kill()
    lines = [line for out, _ in outs for line in out.splitlines()]
    assert len(lines) == rounds * n and all(line.endswith(" ok") for line in lines), \
        [line for line in lines if not line.endswith(" ok")][:5] or [err[-800:] for _, err in outs]
    for r in range(rounds):
        if kind == "store":
            with ResultsStore(tmp_path / f"store-{r}.sqlite") as store:
                assert store.count("r") == n
        else:
            cache = SQLiteCache(tmp_path / f"cache-{r}.sqlite")
            assert all(cache.get(str(i)) == ("1", 1, 1) for i in range(n))
