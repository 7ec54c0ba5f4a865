"""The results store: one SQLite file, one row per (run, item, seed), committed the moment the item finishes.

Why this shape:
- A run is identified by a deterministic hash of everything that changes its results (benchmark, split,
  method, pool, level, limit, config), so re-running the same command after a crash or Ctrl-C RESUMES: the
  items already stored are skipped and nothing is computed or counted twice (`INSERT OR IGNORE` on the
  primary key). The number of seeds is deliberately not part of the id: asking for more seeds later extends
  the same run with new replicates.
- WAL journaling and a busy timeout let a report (or a second eval) read while an eval writes.
- The split name and item count are stored with the run, so a table can never mix up which items it covers.
- Each item's orchestration trace is stored beside its row, in the same transaction: a result never exists
  without its trace, a Ray worker on another machine needs no shared disk, and an evaluation does not create
  one small file per item (file creation cost ~0.3 ms per item here, a visible share of harness CPU).
  `lemon trace` prints or exports one.
- Two processes evaluating the same run on one store share the work through `claims`: before computing an
  (item, seed) a process claims it for a lease (renewed while it works); a claim held by a live process is
  skipped by the others, one whose holder died (same host: its pid is gone) or whose lease expired is taken
  over, and storing the result drops the claim. A duplicate computation (a lease outlived by a slow item) is
  harmless: the first stored row wins.
- A file that is not SQLite, an SQLite file of another program, a store of another schema version, or a
  damaged store is a `StorageError` naming the file and the fix, never a traceback. Every opener goes through
  `ResultsStore`, which refuses another program's file and another version's store BEFORE it writes anything
  (`lemon eval` and `lemon report` used to write into both, and `report` switched any SQLite file it was pointed
  at to WAL and added LEMON's tables); readers open read-only (SQLite's `mode=ro`, `open_existing_store`).
- Rows are decoded under a guard (`_decoded`): a row of the wrong shape (JSON that does not parse, text in a
  number column, written by another program or by hand) is one line naming its table and row, not a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from lemon.errors import LemonError, StorageError
from lemon.files import disk_full, not_regular
from lemon.paths import ensure_dir, lemon_home
from lemon.runtime.trace import TRACE_VERSION, AgentTokens, Trace
from lemon.sqlitefile import ensure_wal, is_busy, open_with_retry

SCHEMA_VERSION = 1
_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    benchmark   TEXT NOT NULL,
    split       TEXT NOT NULL,
    method      TEXT NOT NULL,
    pool        TEXT NOT NULL,
    level       TEXT NOT NULL,
    seeds       INTEGER NOT NULL,      -- how many seeds were requested so far (which ones: run_seeds)
    n_items     INTEGER NOT NULL,      -- items of the split covered (the first n_items in the split's order)
    config_json TEXT NOT NULL,
    created     REAL NOT NULL,
    updated     REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    run_id       TEXT NOT NULL REFERENCES runs(run_id),
    item_id      TEXT NOT NULL,
    seed         INTEGER NOT NULL,
    prediction   TEXT,
    gold         TEXT,
    correct      INTEGER NOT NULL CHECK (correct IN (0, 1)),
    tokens_json  TEXT NOT NULL,        -- worker tokens per agent: {agent: {prompt, completion, capacity}}
    total_tokens INTEGER NOT NULL,     -- worker tokens (all agents) for this item
    orchestrator_tokens INTEGER NOT NULL DEFAULT 0,
    latency_s    REAL NOT NULL,
    trace_id     TEXT,
    status       TEXT NOT NULL,
    stop_reason  TEXT,
    created      REAL NOT NULL,
    PRIMARY KEY (run_id, item_id, seed)
);
CREATE TABLE IF NOT EXISTS traces (
    run_id     TEXT NOT NULL,
    item_id    TEXT NOT NULL,
    seed       INTEGER NOT NULL,
    trace_json TEXT NOT NULL,          -- the runtime's trace (method.md section 6), compact JSON
    PRIMARY KEY (run_id, item_id, seed)
);
CREATE TABLE IF NOT EXISTS claims (
    run_id   TEXT NOT NULL,
    item_id  TEXT NOT NULL,
    seed     INTEGER NOT NULL,
    owner    TEXT NOT NULL,            -- host:pid:token of the process computing it
    expires  REAL NOT NULL,            -- unix time when another process may take it over
    PRIMARY KEY (run_id, item_id, seed)
);
"""
# The columns this code reads and writes, per table: an SQLite file whose tables lack them is another program's.
_COLUMNS = {
    "meta": {"key", "value"},
    "runs": {"run_id", "benchmark", "split", "method", "pool", "level", "seeds", "n_items", "config_json",
             "created", "updated"},
    "items": {"run_id", "item_id", "seed", "prediction", "gold", "correct", "tokens_json", "total_tokens",
              "orchestrator_tokens", "latency_s", "trace_id", "status", "stop_reason", "created"},
    "traces": {"run_id", "item_id", "seed", "trace_json"},
    "claims": {"run_id", "item_id", "seed", "owner", "expires"},
}
CLAIM_LEASE_S = 900.0
# Rows of a run id whose run row is gone: what an evaluation stored after `lemon runs delete` removed its run
# (before issue 26; `put` now refuses such rows). Counted and removed by `orphans` / `delete_orphans`.
_ORPHAN_TABLES = ("items", "traces", "claims", "explanations", "run_seeds")


class RunDeleted(LemonError):
    """The run an evaluation writes to was deleted meanwhile (`lemon runs delete`): it stops, storing nothing."""


def run_deleted(run_id: str, path: Path) -> RunDeleted:
    return RunDeleted(f"run {run_id} was deleted from {path} while this evaluation ran (`lemon runs delete`); "
                      "the evaluation stopped and stored nothing more; run the same command again to start the "
                      "run anew")


# Counterfactual attributions (`lemon explain`), one per (run, item, seed), and the seeds each run was asked
# for (`--seed 3` alone is one complete seed, not 4 of which 3 are missing); kept apart from _SCHEMA so the
# tables are additive: stores written before they existed gain them on open (a reader: empty TEMP tables in their
# place) and stay at SCHEMA_VERSION.
_ADDED_TABLES = {
    "run_seeds": """(
    run_id      TEXT NOT NULL,
    seed        INTEGER NOT NULL,
    PRIMARY KEY (run_id, seed)
)""",
    "explanations": """(
    run_id      TEXT NOT NULL,
    item_id     TEXT NOT NULL,
    seed        INTEGER NOT NULL,
    result_json TEXT NOT NULL,         -- lemon.inspection.explain.Attribution as JSON
    created     REAL NOT NULL,
    PRIMARY KEY (run_id, item_id, seed)
)""",
}


def default_store_path() -> Path:
    """`LEMON_HOME/results.sqlite` (override with `--store`)."""
    return lemon_home() / "results.sqlite"


def make_run_id(**identity: object) -> str:
    """A short deterministic id for a run: sha256 of the canonical JSON of its identity fields."""
    blob = json.dumps(identity, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    benchmark: str
    split: str
    method: str
    pool: str
    level: str
    seeds: int
    n_items: int
    config: dict[str, object]
    created: float
    updated: float

    @property
    def temperature(self) -> float | None:
        """The sampling temperature the run recorded (None if it recorded none, or not as a number)."""
        value = self.config.get("temperature")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    @property
    def max_tokens(self) -> int | None:
        """The reply limit the run recorded (None: the pool's, or none recorded)."""
        return self._count("max_tokens")

    @property
    def limit(self) -> int | None:
        """The `--limit` the run was created with (None: the whole split, or none recorded)."""
        return self._count("limit")

    @property
    def budget_tokens(self) -> int | None:
        """The per-item token budget the run recorded (None: unbounded)."""
        return self._count("budget_tokens")

    @property
    def call_timeout_s(self) -> float | None:
        """The per-call timeout the run recorded (None: the backend's)."""
        value = self.config.get("call_timeout_s")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def _count(self, key: str) -> int | None:
        value = self.config.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ItemRow:
    """The outcome of one (item, seed) of a run."""

    item_id: str
    seed: int
    prediction: str | None
    gold: str | None
    correct: bool
    tokens: dict[str, AgentTokens]  # per agent: its run's `RunResult.tokens_by_agent` record
    total_tokens: int
    latency_s: float
    trace_id: str | None
    status: str
    stop_reason: str | None = None
    orchestrator_tokens: int = 0
    created: float = field(default_factory=time.time)
    # The trace as compact JSON, carried to `put` (not read back by `items`: use `ResultsStore.trace`).
    trace_json: str | None = field(default=None, repr=False, compare=False)


class ResultsStore:
    """SQLite results store. One connection per instance; use it from one thread (the event loop's)."""

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        """Open (or, unless `read_only`, create) the store at `path`; another program's SQLite file or a store
        of another schema version is refused before anything is written to it."""
        self.path = Path(path) if path is not None else default_store_path()
        if self.path.is_dir():
            raise StorageError(f"results store {self.path} is a folder; pass --store a file path such as "
                               f"{self.path / 'results.sqlite'}")
        kind = not_regular(self.path)
        if kind is not None:  # SQLite would open /dev/null and create /dev/null-journal beside it
            raise StorageError(f"results store {self.path} is {kind}, not a regular file; pass --store a file "
                               "path such as ./results.sqlite")
        if not read_only:
            ensure_dir(self.path.parent, "the results store")
        try:
            self._db = self._open_read_only() if read_only else open_with_retry(self.path, self._initialise)
        except sqlite3.Error as exc:
            raise self._storage_error(exc) from None

    def _initialise(self, db: sqlite3.Connection) -> None:
        """Journal mode, schema and version on a fresh connection; safe to repeat after a busy failure. The file's
        version is read first, and again under the write lock (another process may be creating it)."""
        self._db = db
        db.row_factory = sqlite3.Row
        self._refuse_other(_found_version(db), created=True)
        ensure_wal(db)
        db.execute("BEGIN IMMEDIATE")  # one creator at a time; the others wait in the busy handler
        try:
            self._refuse_other(_found_version(db), created=True)
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            for table, columns in _ADDED_TABLES.items():
                db.execute(f"CREATE TABLE IF NOT EXISTS {table} {columns}")
            self._check_schema()
            db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                       (str(SCHEMA_VERSION),))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise

    def _open_read_only(self) -> sqlite3.Connection:
        """A `mode=ro` connection on an existing store of this version: nothing is created or switched (no WAL,
        no table); the additive tables an older store lacks are stood in for by empty TEMP tables."""
        db = sqlite3.connect(self.path.absolute().as_uri() + "?mode=ro", uri=True, timeout=30.0,
                             isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            self._db = db
            self._refuse_other(_found_version(db), created=False)
            self._check_schema()
            have = {r[0] for r in db.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")}
            for table, columns in _ADDED_TABLES.items():
                if table not in have:
                    db.execute(f"CREATE TEMP TABLE {table} {columns}")
        except BaseException:
            db.close()
            raise
        return db

    def _refuse_other(self, found: str | None, *, created: bool) -> None:
        """Refuse a file this LEMON must not touch: another program's SQLite file, a store of another schema
        version, or (`created` False: a reader) an SQLite file without tables."""
        if found == str(SCHEMA_VERSION) or (found is None and created):
            return
        if found is None:
            raise StorageError(f"{self.path} is not a LEMON results store (an SQLite file without tables); pass "
                               "--store the store `lemon eval` wrote")
        if found == "":
            raise StorageError(f"{self.path} is an SQLite file of another program (no LEMON schema version in it; "
                               "it was left as it was); pass --store a new path or the store `lemon eval` wrote")
        raise StorageError(f"results store {self.path} has schema version {found[:40]}, this LEMON reads and "
                           f"writes version {SCHEMA_VERSION} (the store was left as it was); use the LEMON version "
                           "that wrote it, or pass --store a new path")

    def _check_schema(self) -> None:
        """Refuse an SQLite file whose tables are not this store's (another program's database)."""
        for table, wanted in _COLUMNS.items():
            have = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
            if not wanted <= have:
                raise StorageError(f"{self.path} is an SQLite file of another program (its table {table!r} lacks "
                                   f"{', '.join(sorted(wanted - have))}); pass --store a new path")

    def _storage_error(self, exc: sqlite3.Error) -> StorageError:
        """One line for a store SQLite refuses: not a database, damaged, locked, or on a full disk."""
        text = " ".join(str(exc).split())
        if "not a database" in text or "malformed" in text or "corrupt" in text:
            return StorageError(f"results store {self.path} is not a LEMON results store or is damaged ({text}); "
                                f"move it aside (mv '{self.path}' '{self.path}.bad') or pass --store a new path")
        if disk_full(self.path.parent, exc):
            return StorageError(f"results store {self.path}: the disk is full ({text}); free space on that disk "
                                "(every stored row is kept) or pass --store a path on another disk")
        return StorageError(f"results store {self.path}: {text}; check the disk and that no other program holds "
                            "it, or pass --store a new path")

    def _decoded(self, table: str, key: object, build: Callable[[], _T]) -> _T:
        """`build()` of one stored row, or one line naming its table and row: a row another program wrote (JSON
        that does not parse, text in a number column) was a traceback in report, runs, view, trace, export and
        eval."""
        try:
            return build()
        except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError) as exc:
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:160]
            raise StorageError(f"results store {self.path}: the {table} row {key} is malformed ({why}); it was "
                               "written by another program or by hand: restore the store from a copy, or pass "
                               "--store another") from None

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)
        except sqlite3.Error as exc:
            raise self._storage_error(exc) from None

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """All rows, fetched inside the guard: a damaged page may surface only while reading."""
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._storage_error(exc) from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- runs -------------------------------------------------------------------------------------------

    def ensure_run(self, run_id: str, *, benchmark: str, split: str, method: str, pool: str, level: str,
                   seeds: int | Sequence[int], n_items: int, config: Mapping[str, object]) -> RunInfo:
        """Create the run row, or widen its seeds and `n_items` on an existing one (same id = same identity; a
        larger `--limit` adds items to the run, see `evaluate._find_run_id`). `seeds`: the seeds requested
        (an int N: 0..N-1); the run's `seeds` is the number of distinct seeds ever requested."""
        now = time.time()
        wanted = sorted(set(range(seeds) if isinstance(seeds, int) else seeds))
        config_json = json.dumps(dict(config), sort_keys=True, ensure_ascii=False, default=str)
        with self._tx():
            before = self._exec("SELECT seeds FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            self._exec(
                "INSERT OR IGNORE INTO runs(run_id, benchmark, split, method, pool, level, seeds, n_items, "
                "config_json, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, benchmark, split, method, pool, level, len(wanted), n_items, config_json, now, now),
            )
            if before is not None and not self._exec("SELECT 1 FROM run_seeds WHERE run_id = ?", (run_id,)).fetchone():
                wanted = sorted(set(wanted) | set(range(int(before[0]))))  # stored before run_seeds: 0..seeds-1
            self._db.executemany("INSERT OR IGNORE INTO run_seeds(run_id, seed) VALUES (?, ?)",
                                 [(run_id, s) for s in wanted])
            self._exec("UPDATE runs SET seeds = (SELECT COUNT(*) FROM run_seeds WHERE run_id = ?), "
                       "n_items = MAX(n_items, ?), updated = ? WHERE run_id = ?", (run_id, n_items, now, run_id))
        info = self.run(run_id)
        assert info is not None
        return info

    def run(self, run_id: str) -> RunInfo | None:
        row = self._exec("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return self._decoded("runs", repr(run_id), lambda: _run_info(row)) if row else None

    def runs(self) -> list[RunInfo]:
        rows = self._rows("SELECT * FROM runs ORDER BY benchmark, method, created")
        return [self._decoded("runs", repr(r["run_id"]), partial(_run_info, r)) for r in rows]

    # ---- items ------------------------------------------------------------------------------------------

    def put(self, run_id: str, row: ItemRow) -> bool:
        """Commit one result (and its trace) now. Returns False if (run, item, seed) was already stored (kept
        as it was); `RunDeleted` if the run row is gone (a row without its run would be an orphan)."""
        with self._tx():
            self._require_run(run_id)
            cur = self._exec(
                "INSERT OR IGNORE INTO items(run_id, item_id, seed, prediction, gold, correct, tokens_json, "
                "total_tokens, orchestrator_tokens, latency_s, trace_id, status, stop_reason, created) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, row.item_id, row.seed, row.prediction, row.gold, int(bool(row.correct)),
                 json.dumps(row.tokens, sort_keys=True, default=str), int(row.total_tokens),
                 int(row.orchestrator_tokens), float(row.latency_s), row.trace_id, row.status, row.stop_reason,
                 row.created),
            )
            added = cur.rowcount == 1
            if added and row.trace_json is not None:
                self._exec("INSERT OR REPLACE INTO traces(run_id, item_id, seed, trace_json) VALUES (?,?,?,?)",
                                 (run_id, row.item_id, row.seed, row.trace_json))
            self._exec("DELETE FROM claims WHERE run_id = ? AND item_id = ? AND seed = ?",
                       (run_id, row.item_id, row.seed))
        return added

    # ---- claims (two processes on one run share the work) ---------------------------------------------

    def claim(self, run_id: str, item_id: str, seed: int, owner: str, *, lease_s: float = CLAIM_LEASE_S) -> bool:
        """Take (item, seed) for `owner` unless it is stored, or claimed by a live holder whose lease runs;
        also renews `owner`'s other leases (each claim is a heartbeat of the process)."""
        now = time.time()
        key = (run_id, item_id, seed)
        with self._tx():
            self._require_run(run_id)
            if self._exec("SELECT 1 FROM items WHERE run_id = ? AND item_id = ? AND seed = ?", key).fetchone():
                return False
            held = self._exec("SELECT owner, expires FROM claims WHERE run_id = ? AND item_id = ? AND seed = ?",
                              key).fetchone()
            if held and held["owner"] != owner and held["expires"] > now and _holder_alive(held["owner"]):
                return False
            self._exec("INSERT OR REPLACE INTO claims(run_id, item_id, seed, owner, expires) VALUES (?,?,?,?,?)",
                       (*key, owner, now + lease_s))
            self._exec("UPDATE claims SET expires = ? WHERE owner = ?", (now + lease_s, owner))
        return True

    def _require_run(self, run_id: str) -> None:
        """Inside a write transaction: `RunDeleted` unless the run row exists (then no delete can interleave)."""
        if self._exec("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
            raise run_deleted(run_id, self.path)

    def release_claims(self, owner: str) -> int:
        """Drop `owner`'s unfinished claims (its process is stopping): others may compute them at once."""
        with self._tx():
            return self._exec("DELETE FROM claims WHERE owner = ?", (owner,)).rowcount

    def claimed_by_others(self, run_id: str, owner: str) -> int:
        """How many (item, seed) pairs of `run_id` other processes hold now (for the summary)."""
        return int(self._exec("SELECT COUNT(*) FROM claims WHERE run_id = ? AND owner != ? AND expires > ?",
                              (run_id, owner, time.time())).fetchone()[0])

    def trace(self, run_id: str, item_id: str, seed: int = 0) -> Trace | None:
        """The stored trace of (run, item, seed), read through the typed model (`Trace.from_json`), or None."""
        found = self._exec("SELECT trace_json FROM traces WHERE run_id = ? AND item_id = ? AND seed = ?",
                                 (run_id, item_id, seed)).fetchone()
        key = (run_id, item_id, seed)
        return self._decoded("traces", key, lambda: self._trace(found["trace_json"], key)) if found else None

    def _trace(self, text: object, key: tuple[str, str, int]) -> Trace:
        """One stored trace as the typed model; a newer format than this LEMON reads is a `TraceError` naming it."""
        return Trace.from_json(_object(text, "trace_json"),
                               source=f"the trace of run {key[0]} item {key[1]} seed {key[2]} in {self.path}")

    def delete_errors(self, run_id: str) -> int:
        """Drop rows whose status is `error` so they are computed again (after fixing a backend)."""
        with self._tx():
            cur = self._exec("DELETE FROM items WHERE run_id = ? AND status = 'error'", (run_id,))
            self._exec("DELETE FROM traces WHERE run_id = ? AND NOT EXISTS (SELECT 1 FROM items i WHERE "
                             "i.run_id = traces.run_id AND i.item_id = traces.item_id AND i.seed = traces.seed)",
                             (run_id,))
        return cur.rowcount

    def done_keys(self, run_id: str) -> set[tuple[str, int]]:
        rows = self._rows("SELECT item_id, seed FROM items WHERE run_id = ?", (run_id,))
        return {self._decoded("items", (run_id, r["item_id"]), partial(_key, r)) for r in rows}

    def pending_items(self, run_id: str, keys: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """The (item_id, seed) keys not yet stored for `run_id`, in the order given."""
        done = self.done_keys(run_id)
        return [k for k in keys if k not in done]

    def items(self, run_id: str, *, item_ids: Sequence[str] | None = None,
              seeds: Sequence[int] | None = None) -> list[ItemRow]:
        """Stored rows of a run (optionally restricted), ordered by seed then insertion."""
        rows = self._rows("SELECT * FROM items WHERE run_id = ? ORDER BY seed, rowid", (run_id,))
        wanted_items = set(item_ids) if item_ids is not None else None
        wanted_seeds = set(seeds) if seeds is not None else None
        out = []
        for r in rows:
            row = self._decoded("items", (run_id, r["item_id"], r["seed"]), partial(_item_row, r))
            if wanted_items is not None and row.item_id not in wanted_items:
                continue
            if wanted_seeds is not None and row.seed not in wanted_seeds:
                continue
            out.append(row)
        return out

    def resolve_run(self, selector: str) -> RunInfo:
        """The run whose id is `selector` or starts with it (reports print ids short); one line if none or
        several match."""
        exact = self.run(selector)
        if exact is not None:
            return exact
        rows = self._db.execute("SELECT * FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY created",
                                (len(selector), selector)).fetchall() if selector else []
        if len(rows) == 1:
            return self._decoded("runs", repr(rows[0]["run_id"]), lambda: _run_info(rows[0]))
        if not rows:
            raise LemonError(f"no run {selector!r} in {self.path}; list its runs with `lemon runs --store "
                             f"{self.path}`")
        ids = ", ".join(r["run_id"] for r in rows[:5])
        raise LemonError(f"run id prefix {selector!r} matches {len(rows)} runs ({ids}); give more characters")

    def put_explanation(self, run_id: str, item_id: str, seed: int, result: Mapping[str, object]) -> None:
        """Store (or replace) the counterfactual attribution of one (run, item, seed), in one transaction."""
        blob = json.dumps(dict(result), ensure_ascii=False, default=str)
        with self._tx():
            self._db.execute("INSERT OR REPLACE INTO explanations(run_id, item_id, seed, result_json, created) "
                             "VALUES (?,?,?,?,?)", (run_id, item_id, seed, blob, time.time()))

    def explanation(self, run_id: str, item_id: str, seed: int = 0) -> dict[str, object] | None:
        found = self._exec("SELECT result_json FROM explanations WHERE run_id = ? AND item_id = ? AND seed = ?",
                           (run_id, item_id, seed)).fetchone()
        key = (run_id, item_id, seed)
        return self._decoded("explanations", key, lambda: _object(found["result_json"], "result_json")) if found \
            else None

    def explanations(self, run_id: str) -> list[dict[str, object]]:
        rows = self._rows("SELECT item_id, seed, result_json FROM explanations WHERE run_id = ? ORDER BY item_id, seed",
                          (run_id,))
        return [self._decoded("explanations", (run_id, r["item_id"], r["seed"]),
                              partial(_object, r["result_json"], "result_json")) for r in rows]

    def traces(self, run_id: str, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Trace]:
        """The stored traces of the given (item, seed) keys of a run, each read through the typed model."""
        wanted = set(keys)
        rows = self._rows("SELECT item_id, seed, trace_json FROM traces WHERE run_id = ?", (run_id,))
        found: dict[tuple[str, int], Trace] = {}
        for r in rows:
            key = self._decoded("traces", (run_id, r["item_id"]), partial(_key, r))
            if key in wanted:
                found[key] = self._decoded("traces", (run_id, *key),
                                           partial(self._trace, r["trace_json"], (run_id, *key)))
        return found

    def _check_trace_versions(self, run_id: str) -> None:
        """Refuse, as reading it would, the first trace of a run that is not of a version this LEMON reads: the
        readers that pick single fields inside SQLite (`task_texts`, `topologies`, `spec_sources`) never walk a
        trace of a newer format as if it were this one."""
        found = self._exec("SELECT item_id, seed, trace_json FROM traces WHERE run_id = ? AND json_valid(trace_json) "
                           "AND json_type(trace_json) = 'object' AND (json_type(trace_json, '$.version') NOT IN "
                           "('integer', 'null') OR json_extract(trace_json, '$.version') NOT BETWEEN 1 AND ?) LIMIT 1",
                           (run_id, TRACE_VERSION)).fetchone()
        if found is not None:
            key = (run_id, found["item_id"], found["seed"])
            self._decoded("traces", key, lambda: self._trace(found["trace_json"], key))

    def task_texts(self, run_id: str, max_chars: int = 2000) -> dict[tuple[str, int], str]:
        """The task text of each (item, seed) of a run, read inside SQLite (`lemon view` searches it for every
        item without parsing the whole traces); at most `max_chars` of each, none for traces without one."""
        self._check_trace_versions(run_id)
        rows = self._rows("SELECT item_id, seed, CASE WHEN json_valid(trace_json) THEN "
                          "substr(json_extract(trace_json, '$.task'), 1, ?) END AS task FROM traces WHERE run_id = ?",
                          (max_chars, run_id))
        return {self._decoded("traces", (run_id, r["item_id"]), partial(_key, r)): str(r["task"]) for r in rows
                if r["task"]}

    def topologies(self, run_id: str) -> dict[tuple[str, int], dict[str, object]]:
        """The team (the trace's `topology`) of each (item, seed) of a run, read inside SQLite (the report
        counts the teams a policy wrote without parsing whole traces)."""
        self._check_trace_versions(run_id)
        rows = self._rows("SELECT item_id, seed, json_extract(trace_json, '$.topology') AS top FROM traces "
                          "WHERE run_id = ? AND json_valid(trace_json)", (run_id,))
        return {self._decoded("traces", (run_id, r["item_id"]), partial(_key, r)):
                self._decoded("traces", (run_id, r["item_id"], r["seed"]), partial(_object, r["top"], "topology"))
                for r in rows if r["top"]}

    def spec_sources(self, run_id: str) -> dict[str, int]:
        """How many of a run's specs came from each source of its orchestrator's decision (`model`: valid as
        written, `repaired`, `fallback`: `repair.fallback_spec` ran in place of unusable output, `template`); empty for
        a fixed baseline, which has no orchestrator. Read inside SQLite, like `topologies`."""
        self._check_trace_versions(run_id)
        rows = self._rows("SELECT json_extract(e.value, '$.source') AS source, COUNT(*) AS n FROM traces AS t, "
                          "json_each(t.trace_json, '$.events') AS e WHERE t.run_id = ? AND json_valid(t.trace_json) "
                          "AND json_extract(e.value, '$.type') = 'orchestrator_decision' GROUP BY source", (run_id,))
        return {str(r["source"]): int(r["n"]) for r in rows if r["source"] is not None}

    def count(self, run_id: str) -> int:
        return int(self._exec("SELECT COUNT(*) FROM items WHERE run_id = ?", (run_id,)).fetchone()[0])

    def orphans(self) -> dict[str, int]:
        """Run ids that have rows (items, traces, claims, attributions) but no run row, with their item count."""
        found: dict[str, int] = {}
        for table in _ORPHAN_TABLES:
            rows = self._rows(f"SELECT run_id, COUNT(*) AS n FROM {table} WHERE run_id NOT IN "
                              "(SELECT run_id FROM runs) GROUP BY run_id")
            for r in rows:
                found[r["run_id"]] = found.get(r["run_id"], 0) + (int(r["n"]) if table == "items" else 0)
        return found

    def delete_orphans(self) -> int:
        """Remove every row whose run row is gone, in one transaction; returns how many item rows went."""
        with self._tx():
            n = self._exec("DELETE FROM items WHERE run_id NOT IN (SELECT run_id FROM runs)").rowcount
            for table in _ORPHAN_TABLES[1:]:
                self._exec(f"DELETE FROM {table} WHERE run_id NOT IN (SELECT run_id FROM runs)")
        return n

    def delete_run(self, run_id: str) -> int:
        """Remove a run with its items, traces, claims and attributions, in one transaction (`lemon runs
        delete`); returns how many item rows went."""
        with self._tx():
            n = self._exec("DELETE FROM items WHERE run_id = ?", (run_id,)).rowcount
            for table in ("traces", "claims", "explanations", "run_seeds", "runs"):
                self._exec(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        return n

    def _tx(self) -> _Transaction:
        return _Transaction(self)


def open_existing_store(path: Path, *, writable: bool = False) -> ResultsStore:
    """A results store that must already exist and be one of this version's, opened read-only unless `writable`
    (`lemon runs delete`, `lemon explain`): a missing file, a file that is not a LEMON store, or a store of
    another schema version is one line, and nothing is written to any of them."""
    if not path.exists():  # a folder or a device: ResultsStore says what it is
        raise LemonError(f"no results store at {path}; run `lemon eval` first or pass --store")
    return ResultsStore(path, read_only=not writable)


def _found_version(db: sqlite3.Connection) -> str | None:
    """The schema version an SQLite file holds, read without writing: None for a new file (no tables yet), ""
    for a file with tables but no LEMON version (another program's), else the version stored in `meta`."""
    if db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None:
        return None
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError as exc:  # no `meta` table, or one of another shape
        if is_busy(exc):
            raise
        return ""
    return "" if row is None else str(row[0])


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT/ROLLBACK on an autocommit connection."""

    def __init__(self, store: ResultsStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        self._store._exec("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self._store._exec("COMMIT")
            return
        # The error being raised says more than a failed rollback of a damaged file would.
        with contextlib.suppress(sqlite3.Error):
            self._store._db.execute("ROLLBACK")


def new_claim_owner() -> str:
    """A claim holder's identity: host, pid (to see on this host whether it still runs) and a random token."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _holder_alive(owner: str) -> bool:
    """False when the claim's holder surely stopped: on this host, its pid is gone or is this process (an
    earlier incarnation, e.g. PID 1 in a restarted container). Another host's holder counts as alive; its
    lease decides."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by another user
    return True


def _run_info(r: sqlite3.Row) -> RunInfo:
    """A `runs` row, its types checked (a raise here is `ResultsStore._decoded`'s one line)."""
    return RunInfo(run_id=_text(r["run_id"], "run_id"), benchmark=_text(r["benchmark"], "benchmark"),
                   split=_text(r["split"], "split"), method=_text(r["method"], "method"),
                   pool=_text(r["pool"], "pool"), level=_text(r["level"], "level"), seeds=_int(r["seeds"], "seeds"),
                   n_items=_int(r["n_items"], "n_items"),
                   config=_object(r["config_json"], "config_json"), created=_real(r["created"], "created"),
                   updated=_real(r["updated"], "updated"))


def _item_row(r: sqlite3.Row) -> ItemRow:
    """An `items` row, its types checked (a raise here is `ResultsStore._decoded`'s one line)."""
    item_id, seed = _key(r)
    return ItemRow(item_id=item_id, seed=seed, prediction=_maybe_text(r["prediction"], "prediction"),
                   gold=_maybe_text(r["gold"], "gold"), correct=bool(_int(r["correct"], "correct")),
                   tokens=_tokens(r["tokens_json"]), total_tokens=_int(r["total_tokens"], "total_tokens"),
                   latency_s=_real(r["latency_s"], "latency_s"), trace_id=_maybe_text(r["trace_id"], "trace_id"),
                   status=_text(r["status"], "status"), stop_reason=_maybe_text(r["stop_reason"], "stop_reason"),
                   orchestrator_tokens=_int(r["orchestrator_tokens"], "orchestrator_tokens"),
                   created=_real(r["created"], "created"))


def _key(r: sqlite3.Row) -> tuple[str, int]:
    return _text(r["item_id"], "item_id"), _int(r["seed"], "seed")


def _text(value: object, column: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{column} is {value!r:.40}, not text")
    return value


def _maybe_text(value: object, column: str) -> str | None:
    return None if value is None else _text(value, column)


def _int(value: object, column: str) -> int:
    if type(value) is not int:
        raise TypeError(f"{column} is {value!r:.40}, not an integer")
    return value


def _real(value: object, column: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{column} is {value!r:.40}, not a number")
    return float(value)


def _object(text: object, column: str) -> dict[str, Any]:
    """The JSON object stored as text in `column` (a JSON array, number or string is the wrong shape too)."""
    value = json.loads(_text(text, column))
    if not isinstance(value, dict):
        raise TypeError(f"{column} holds a JSON {type(value).__name__}, not an object")
    return value


def _tokens(text: object) -> dict[str, AgentTokens]:
    """`tokens_json`: per agent an object with integer `prompt` and `completion` counts (what readers sum)."""
    tokens = _object(text, "tokens_json")
    for agent, counts in tokens.items():
        if not isinstance(counts, dict) or any(type(counts.get(k)) is not int for k in ("prompt", "completion")):
            raise TypeError(f"tokens_json: agent {agent!r:.40} has no integer prompt and completion counts")
    return tokens
