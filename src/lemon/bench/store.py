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
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lemon.errors import ConfigError, LemonError
from lemon.paths import lemon_home

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    benchmark   TEXT NOT NULL,
    split       TEXT NOT NULL,
    method      TEXT NOT NULL,
    pool        TEXT NOT NULL,
    level       TEXT NOT NULL,
    seeds       INTEGER NOT NULL,      -- largest number of seeds requested so far (seeds are 0..seeds-1)
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
"""


# Counterfactual attributions (`lemon explain`), one per (run, item, seed); kept apart from _SCHEMA so the
# table is additive: stores written before it existed gain it on open and stay at SCHEMA_VERSION.
_EXPLAIN_SCHEMA = """
CREATE TABLE IF NOT EXISTS explanations (
    run_id      TEXT NOT NULL,
    item_id     TEXT NOT NULL,
    seed        INTEGER NOT NULL,
    result_json TEXT NOT NULL,         -- lemon.bench.explain.Attribution as JSON
    created     REAL NOT NULL,
    PRIMARY KEY (run_id, item_id, seed)
);
"""


def default_store_path() -> Path:
    """`LEMON_HOME/results.sqlite` (override with `--store`)."""
    return lemon_home() / "results.sqlite"


def make_run_id(**identity: Any) -> str:
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
    config: dict[str, Any]
    created: float
    updated: float


@dataclass(frozen=True)
class ItemRow:
    """The outcome of one (item, seed) of a run."""

    item_id: str
    seed: int
    prediction: str | None
    gold: str | None
    correct: bool
    tokens: dict[str, Any]
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

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open results store {self.path}: {exc}") from exc
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        # NORMAL is durable across process crashes in WAL mode (only an OS crash can lose the last commits).
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.executescript(_EXPLAIN_SCHEMA)
        self._db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                         (str(SCHEMA_VERSION),))

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- runs -------------------------------------------------------------------------------------------

    def ensure_run(self, run_id: str, *, benchmark: str, split: str, method: str, pool: str, level: str,
                   seeds: int, n_items: int, config: dict[str, Any]) -> RunInfo:
        """Create the run row, or widen `seeds` on an existing one (same id = same identity)."""
        now = time.time()
        config_json = json.dumps(config, sort_keys=True, ensure_ascii=False, default=str)
        with self._tx():
            self._db.execute(
                "INSERT OR IGNORE INTO runs(run_id, benchmark, split, method, pool, level, seeds, n_items, "
                "config_json, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, benchmark, split, method, pool, level, seeds, n_items, config_json, now, now),
            )
            self._db.execute("UPDATE runs SET seeds = MAX(seeds, ?), updated = ? WHERE run_id = ?",
                             (seeds, now, run_id))
        info = self.run(run_id)
        assert info is not None
        return info

    def run(self, run_id: str) -> RunInfo | None:
        row = self._db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return _run_info(row) if row else None

    def runs(self) -> list[RunInfo]:
        rows = self._db.execute("SELECT * FROM runs ORDER BY benchmark, method, created").fetchall()
        return [_run_info(r) for r in rows]

    # ---- items ------------------------------------------------------------------------------------------

    def put(self, run_id: str, row: ItemRow) -> bool:
        """Commit one result (and its trace) now. Returns False if (run, item, seed) was already stored (kept
        as it was)."""
        with self._tx():
            cur = self._db.execute(
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
                self._db.execute("INSERT OR REPLACE INTO traces(run_id, item_id, seed, trace_json) VALUES (?,?,?,?)",
                                 (run_id, row.item_id, row.seed, row.trace_json))
        return added

    def trace(self, run_id: str, item_id: str, seed: int = 0) -> dict[str, Any] | None:
        """The stored trace of (run, item, seed), or None."""
        found = self._db.execute("SELECT trace_json FROM traces WHERE run_id = ? AND item_id = ? AND seed = ?",
                                 (run_id, item_id, seed)).fetchone()
        return json.loads(found["trace_json"]) if found else None

    def delete_errors(self, run_id: str) -> int:
        """Drop rows whose status is `error` so they are computed again (after fixing a backend)."""
        with self._tx():
            cur = self._db.execute("DELETE FROM items WHERE run_id = ? AND status = 'error'", (run_id,))
            self._db.execute("DELETE FROM traces WHERE run_id = ? AND NOT EXISTS (SELECT 1 FROM items i WHERE "
                             "i.run_id = traces.run_id AND i.item_id = traces.item_id AND i.seed = traces.seed)",
                             (run_id,))
        return cur.rowcount

    def done_keys(self, run_id: str) -> set[tuple[str, int]]:
        rows = self._db.execute("SELECT item_id, seed FROM items WHERE run_id = ?", (run_id,)).fetchall()
        return {(r["item_id"], int(r["seed"])) for r in rows}

    def pending_items(self, run_id: str, keys: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """The (item_id, seed) keys not yet stored for `run_id`, in the order given."""
        done = self.done_keys(run_id)
        return [k for k in keys if k not in done]

    def items(self, run_id: str, *, item_ids: Sequence[str] | None = None,
              seeds: Sequence[int] | None = None) -> list[ItemRow]:
        """Stored rows of a run (optionally restricted), ordered by seed then insertion."""
        rows = self._db.execute("SELECT * FROM items WHERE run_id = ? ORDER BY seed, rowid", (run_id,))
        wanted_items = set(item_ids) if item_ids is not None else None
        wanted_seeds = set(seeds) if seeds is not None else None
        out = []
        for r in rows:
            if wanted_items is not None and r["item_id"] not in wanted_items:
                continue
            if wanted_seeds is not None and int(r["seed"]) not in wanted_seeds:
                continue
            out.append(_item_row(r))
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
            return _run_info(rows[0])
        if not rows:
            raise LemonError(f"no run {selector!r} in {self.path}; list the runs with `lemon report --store "
                             f"{self.path}`")
        ids = ", ".join(r["run_id"] for r in rows[:5])
        raise LemonError(f"run id prefix {selector!r} matches {len(rows)} runs ({ids}); give more characters")

    def put_explanation(self, run_id: str, item_id: str, seed: int, result: dict[str, Any]) -> None:
        """Store (or replace) the counterfactual attribution of one (run, item, seed), in one transaction."""
        with self._tx():
            self._db.execute("INSERT OR REPLACE INTO explanations(run_id, item_id, seed, result_json, created) "
                             "VALUES (?,?,?,?,?)", (run_id, item_id, seed,
                                                    json.dumps(result, ensure_ascii=False, default=str), time.time()))

    def explanation(self, run_id: str, item_id: str, seed: int = 0) -> dict[str, Any] | None:
        found = self._db.execute("SELECT result_json FROM explanations WHERE run_id = ? AND item_id = ? AND seed = ?",
                                 (run_id, item_id, seed)).fetchone()
        return json.loads(found["result_json"]) if found else None

    def explanations(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT result_json FROM explanations WHERE run_id = ? ORDER BY item_id, seed",
                                (run_id,)).fetchall()
        return [json.loads(r["result_json"]) for r in rows]

    def traces(self, run_id: str, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """The stored traces (as compact JSON text, unparsed) of the given (item, seed) keys of a run."""
        wanted = set(keys)
        rows = self._db.execute("SELECT item_id, seed, trace_json FROM traces WHERE run_id = ?", (run_id,))
        return {(r["item_id"], int(r["seed"])): r["trace_json"] for r in rows
                if (r["item_id"], int(r["seed"])) in wanted}

    def count(self, run_id: str) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM items WHERE run_id = ?", (run_id,)).fetchone()[0])

    def _tx(self) -> _Transaction:
        return _Transaction(self._db)


def open_existing_store(path: Path) -> ResultsStore:
    """Open a results store that must already exist and be one of this version's, without writing to anything
    else: a missing file, a file that is not a LEMON store, or a store of another schema version is one line."""
    if not path.is_file():
        raise LemonError(f"no results store at {path}; run `lemon eval` first or pass --store")
    try:
        probe = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
        try:
            row = probe.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        finally:
            probe.close()
    except sqlite3.Error:
        raise LemonError(f"{path} is not a LEMON results store (no readable `meta` table); pass the store "
                         "`lemon eval` wrote") from None
    if row is None or str(row[0]) != str(SCHEMA_VERSION):
        found = "none" if row is None else row[0]
        raise LemonError(f"results store {path} has schema version {found}, this LEMON reads version "
                         f"{SCHEMA_VERSION}; use the LEMON version that wrote it or re-run `lemon eval`")
    return ResultsStore(path)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT/ROLLBACK on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")


def _run_info(r: sqlite3.Row) -> RunInfo:
    return RunInfo(run_id=r["run_id"], benchmark=r["benchmark"], split=r["split"], method=r["method"],
                   pool=r["pool"], level=r["level"], seeds=int(r["seeds"]), n_items=int(r["n_items"]),
                   config=json.loads(r["config_json"]), created=float(r["created"]),
                   updated=float(r["updated"]))


def _item_row(r: sqlite3.Row) -> ItemRow:
    return ItemRow(item_id=r["item_id"], seed=int(r["seed"]), prediction=r["prediction"], gold=r["gold"],
                   correct=bool(r["correct"]), tokens=json.loads(r["tokens_json"]),
                   total_tokens=int(r["total_tokens"]), latency_s=float(r["latency_s"]),
                   trace_id=r["trace_id"], status=r["status"], stop_reason=r["stop_reason"],
                   orchestrator_tokens=int(r["orchestrator_tokens"]), created=float(r["created"]))

