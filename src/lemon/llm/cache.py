"""A persistent, request-keyed LLM cache in SQLite, wrapped around any backend.

Only deterministic requests are cached (greedy decoding, or sampling with an explicit seed): for those the
same request always yields the same text, so a hit is exact. The key is `request_key(model_id, request)`:
model + messages + parameters + seed + constraints. WAL mode and a busy timeout let several processes (Ray
workers, parallel evaluations) share one file.

The cache only saves work, so its faults are told apart by when they happen: a file that cannot be created,
is not SQLite, or is damaged is a `StorageError` at open or lookup (before anything is paid for), naming the
file and the fix (delete or rename it; it holds nothing else). A completion that cannot be WRITTEN is logged
and still returned: the call was paid for, and losing its result to a cache fault would be worse.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from lemon.errors import BackendError, StorageError
from lemon.files import disk_full
from lemon.llm.base import Backend, ChatRequest, Completion, Scorer, request_key
from lemon.paths import ensure_dir
from lemon.sqlitefile import ensure_wal, is_busy, open_with_retry

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created REAL NOT NULL
)
"""
# Scores of replies (a stop rule's logprob gate), in a table of their own: a cache file written before it
# existed gains it on open and keeps every completion as it was.
_SCORES_SCHEMA = """
CREATE TABLE IF NOT EXISTS scores (
    key TEXT PRIMARY KEY,
    model TEXT,
    logprob REAL,
    created REAL
)
"""


def score_key(model_id: str, request: ChatRequest, reply: str) -> str:
    """The cache key of a reply's score: sha256 over the request's key and the reply."""
    blob = json.dumps([request_key(model_id, request), reply], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _initialise(db: sqlite3.Connection) -> None:
    """WAL, the schema, and a read that fails on a file of another shape; safe to repeat after a busy failure
    (another process opening the same new file: `lemon.sqlitefile`)."""
    ensure_wal(db)
    db.execute(_SCHEMA)
    db.execute(_SCORES_SCHEMA)
    db.execute("SELECT key, model, text, prompt_tokens, completion_tokens, created FROM completions LIMIT 1").fetchall()


class SQLiteCache:
    """The cache file; one connection per process, guarded by a lock (calls are short)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        ensure_dir(self.path.parent, "the LLM cache")
        self._lock = threading.Lock()
        try:
            self._conn = open_with_retry(self.path, _initialise, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self.error(exc) from None

    def error(self, exc: sqlite3.Error) -> StorageError:
        text = " ".join(str(exc).split())
        if is_busy(exc):  # an intact cache another process holds: nothing to delete either
            return StorageError(f"LLM cache {self.path} is busy ({text}): another process held it for 30 s; run "
                                "again when it is done, or pass --no-cache")
        if disk_full(self.path.parent, exc):  # an intact cache on a full disk: nothing to delete
            return StorageError(f"LLM cache {self.path}: the disk is full ({text}); free space on that disk, "
                                "point LEMON_HOME at another one, or pass --no-cache")
        return StorageError(f"LLM cache {self.path} cannot be used ({text}); it only saves repeated calls: delete "
                            f"or rename it (mv '{self.path}' '{self.path}.bad') and run again, or pass --no-cache")

    def get(self, key: str) -> tuple[str, int, int] | None:
        try:
            with self._lock:
                row = self._conn.execute(
                    "SELECT text, prompt_tokens, completion_tokens FROM completions WHERE key = ?", (key,)
                ).fetchone()
            return (str(row[0]), int(row[1]), int(row[2])) if row else None
        except sqlite3.Error as exc:
            raise self.error(exc) from None
        except (TypeError, ValueError):  # a row of the wrong types: treat as a miss, it will be overwritten
            log.warning("LLM cache %s: unreadable entry %s…; calling the model instead", self.path, key[:12])
            return None

    def put(self, key: str, c: Completion) -> None:
        """Store a completion; a failure is logged, never raised (the caller holds a paid result)."""
        try:
            with self._lock:
                self._conn.execute(
                    "INSERT OR REPLACE INTO completions VALUES (?, ?, ?, ?, ?, ?)",
                    (key, c.model, c.text, c.prompt_tokens, c.completion_tokens, time.time()),
                )
        except sqlite3.Error as exc:
            log.warning("LLM cache %s: could not store a completion (%s); the result is kept, not cached",
                        self.path, " ".join(str(exc).split()))

    def get_score(self, key: str) -> float | None:
        try:
            with self._lock:
                row = self._conn.execute("SELECT logprob FROM scores WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise self.error(exc) from None
        if row is None:
            return None
        try:
            value = float(row[0])
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):  # a row of the wrong type: a miss, it will be overwritten
            log.warning("LLM cache %s: unreadable score %s…; scoring again", self.path, key[:12])
            return None
        return value

    def put_score(self, key: str, model: str, logprob: float) -> None:
        """Store a score; a failure is logged, never raised (the caller holds a computed result)."""
        try:
            with self._lock:
                self._conn.execute("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?)",
                                   (key, model, logprob, time.time()))
        except sqlite3.Error as exc:
            log.warning("LLM cache %s: could not store a score (%s); the result is kept, not cached",
                        self.path, " ".join(str(exc).split()))

    def completion_rows(self) -> list[tuple[str, str, str, int, int]]:
        """Every completion as (key, model, text, prompt_tokens, completion_tokens), by key."""
        try:
            with self._lock:
                return self._conn.execute("SELECT key, model, text, prompt_tokens, completion_tokens "
                                          "FROM completions ORDER BY key").fetchall()
        except sqlite3.Error as exc:
            raise self.error(exc) from None

    def score_rows(self) -> list[tuple[str, str, float]]:
        """Every score as (key, model, logprob), by key."""
        try:
            with self._lock:
                return self._conn.execute("SELECT key, model, logprob FROM scores ORDER BY key").fetchall()
        except sqlite3.Error as exc:
            raise self.error(exc) from None

    @contextlib.contextmanager
    def staging(self) -> Iterator[ImportStage]:
        """An `ImportStage` on this cache's connection (held for the whole import); its temporary tables are
        dropped on leaving, whatever happened."""
        with self._lock:
            try:
                for table, columns in _STAGED.items():
                    self._conn.execute(f"DROP TABLE IF EXISTS temp.{table}")
                    self._conn.execute(f"CREATE TEMP TABLE {table} ({columns})")
            except sqlite3.Error as exc:
                raise _staging_error(exc) from None
            try:
                yield ImportStage(self, self._conn)
            finally:
                for table in _STAGED:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute(f"DROP TABLE IF EXISTS temp.{table}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()


# An import's rows, held apart until its whole file has been read (`ImportStage`): temporary tables of the cache's
# connection live in SQLite's temporary files, so a large import costs disk there, not memory.
_STAGED = {
    "lemon_import_completions": "key TEXT PRIMARY KEY, line INTEGER NOT NULL, model TEXT NOT NULL, text TEXT NOT "
                                "NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL",
    "lemon_import_scores": "key TEXT PRIMARY KEY, line INTEGER NOT NULL, model TEXT NOT NULL, logprob REAL NOT NULL",
}


def _staging_error(exc: sqlite3.Error) -> StorageError:
    """A failure of the temporary tables: neither the cache nor the imported file is at fault."""
    text = " ".join(str(exc).split())
    return StorageError(f"cannot hold the imported rows in SQLite's temporary files ({text}); free space in the "
                        "temporary folder (or point SQLITE_TMPDIR at another) and import again; nothing was imported")


class ImportStage:
    """The rows of one import file, staged line by line, then added to the cache in ONE transaction (`merge`).

    Why: the file is read as a stream (it may be large, and it is not trusted), and a refused file must leave
    the cache exactly as it was; staging first makes every check (a key the file gives two values) run before
    anything is written, and the counts `merge` returns are its own rows, never another process's."""

    def __init__(self, cache: SQLiteCache, conn: sqlite3.Connection) -> None:
        self._cache = cache
        self._conn = conn

    def completion(self, line: int, row: tuple[str, str, str, int, int]) -> int | None:
        """Stage one completion; the line of an earlier row of the same key with another value, else None."""
        key, *value = row
        return self._stage("lemon_import_completions", "model = ? AND text = ? AND prompt_tokens = ? AND "
                           "completion_tokens = ?", line, key, value)

    def score(self, line: int, row: tuple[str, str, float]) -> int | None:
        """Stage one score; the line of an earlier row of the same key with another value, else None."""
        key, *value = row
        return self._stage("lemon_import_scores", "model = ? AND logprob = ?", line, key, value)

    def _stage(self, table: str, same: str, line: int, key: str, value: list[object]) -> int | None:
        marks = ", ".join("?" * (len(value) + 2))
        try:
            added = self._conn.execute(f"INSERT INTO temp.{table} VALUES ({marks}) ON CONFLICT(key) DO NOTHING",
                                       (key, line, *value)).rowcount
            if added:
                return None
            other = self._conn.execute(f"SELECT line FROM temp.{table} WHERE key = ? AND NOT ({same})",
                                       (key, *value)).fetchone()
        except sqlite3.Error as exc:
            raise _staging_error(exc) from None
        return None if other is None else int(other[0])

    def staged(self) -> int:
        """How many distinct keys are staged (completions and scores together)."""
        try:
            return sum(int(self._conn.execute(f"SELECT COUNT(*) FROM temp.{table}").fetchone()[0])
                       for table in _STAGED)
        except sqlite3.Error as exc:
            raise _staging_error(exc) from None

    def merge(self) -> tuple[int, int]:
        """Add the staged rows whose keys the cache lacks, in one transaction (a key it holds is kept as it is);
        how many completions and scores THIS transaction added (counted inside it)."""
        now = time.time()
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                completions = self._conn.execute(
                    "INSERT OR IGNORE INTO main.completions(key, model, text, prompt_tokens, completion_tokens, "
                    "created) SELECT key, model, text, prompt_tokens, completion_tokens, ? FROM "
                    "temp.lemon_import_completions ORDER BY key", (now,)).rowcount
                scores = self._conn.execute(
                    "INSERT OR IGNORE INTO main.scores(key, model, logprob, created) SELECT key, model, logprob, ? "
                    "FROM temp.lemon_import_scores ORDER BY key", (now,)).rowcount
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._cache.error(exc) from None
        return completions, scores


class CachedBackend:
    """`inner` with a persistent cache in front; `hits` counts requests served from the file."""

    def __init__(self, inner: Backend, cache: SQLiteCache) -> None:
        self.inner = inner
        self.cache = cache
        self.hits = 0
        self.score_hits = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    async def complete(self, request: ChatRequest) -> Completion:
        if not request.params.deterministic:
            return await self.inner.complete(request)
        key = request_key(self.model_id, request)
        found = self.cache.get(key)
        if found is not None:
            self.hits += 1
            text, pt, ct = found
            logprob = self.cache.get_score(score_key(self.model_id, request, text))
            self.score_hits += logprob is not None  # the reply's banked score, served with it
            return Completion(text, pt, ct, 0.0, self.model_id, cached=True, logprob=logprob)
        completion = await self.inner.complete(request)
        self.cache.put(key, completion)
        if completion.logprob is not None:  # read from the generation: the reply's score, banked with it
            self.cache.put_score(score_key(self.model_id, request, completion.text), self.model_id,
                                 completion.logprob)
        return completion

    async def score(self, request: ChatRequest, reply: str) -> float:
        """The inner backend's score of `reply`, cached in the `scores` table whatever the sampling parameters
        (a teacher-forced score does not depend on them); `score_hits` counts those served from the file."""
        if not isinstance(self.inner, Scorer):
            raise BackendError(f"{self.model_id}: this backend cannot score a reply (only an embedded llama.cpp "
                               "model can); serve the level embedded, or drop the logprob gate")
        key = score_key(self.model_id, request, reply)
        found = self.cache.get_score(key)
        if found is not None:
            self.score_hits += 1
            return found
        value = await self.inner.score(request, reply)
        self.cache.put_score(key, self.model_id, value)
        return value

    async def prepare(self) -> None:
        await self.inner.prepare()

    async def aclose(self) -> None:
        await self.inner.aclose()


class CacheOnlyBackend:
    """The inner backend of an offline pool: every request must be answered by the cache in front of it.

    The LLM cache is the sample bank (an agent's sampling seed depends on its role and rank, not its team:
    `runtime.executor.sample_slot`), so replaying teams made of banked agents through an offline pool is exact
    and costs no model call; a request the bank lacks is a one-line error instead of a silent 20 s call."""

    def __init__(self, model_id: str, what: str = "an offline pool",
                 fix: str = "build the sample bank first (experiments/adaptive_cpu.sh bank)") -> None:
        self._model_id = model_id
        self._what = what  # who answers only from the cache, as the error names it
        self._fix = fix

    @property
    def model_id(self) -> str:
        return self._model_id

    async def complete(self, request: ChatRequest) -> Completion:
        raise BackendError(f"{self._model_id}: this request is not in the LLM cache ({self._what} answers only "
                           f"from it); {self._fix}")

    async def score(self, request: ChatRequest, reply: str) -> float:
        raise BackendError(f"{self._model_id}: this reply's score is not in the LLM cache (an offline pool "
                           "answers only from it, and the sample bank lacks it); run the team once on the live "
                           "pool over the same cache to bank its scores")

    async def prepare(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
