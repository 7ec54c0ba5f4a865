"""Opening an SQLite file that other processes may be opening at the same instant (a shared leaf module).

Why: some steps of opening a new WAL database (the journal-mode switch, the first read of a WAL being created)
answer SQLITE_BUSY at once instead of waiting in the busy handler, so two processes started together on one new
file failed with "database is locked": the results store did until it retried (issue 19), and the LLM cache did
still (two `lemon eval` on one LEMON_HOME, 1 start in about 50 on a loaded machine, 2026-11-28). Both open
through `open_with_retry`.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

#: How long an opener keeps retrying while other processes hold the new file.
OPEN_DEADLINE_S = 60.0


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused because another connection holds the file (worth retrying)."""
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def open_with_retry(path: Path, initialise: Callable[[sqlite3.Connection], None], *,
                    check_same_thread: bool = True) -> sqlite3.Connection:
    """A connection (autocommit, 30 s busy timeout) on which `initialise` succeeded, retried with a short
    random back-off while another process holds the new file, until `OPEN_DEADLINE_S`; any other error, or
    busy past the deadline, is raised. `initialise` must be safe to repeat on a fresh connection."""
    deadline = time.monotonic() + OPEN_DEADLINE_S
    rng = random.Random(os.getpid())
    while True:
        db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=check_same_thread)
        try:
            initialise(db)
            return db
        except sqlite3.Error as exc:
            db.close()
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
        except BaseException:
            db.close()
            raise
        time.sleep(rng.uniform(0.01, 0.1))


def ensure_wal(db: sqlite3.Connection) -> None:
    """WAL journal mode, switched only when the file is not in it yet: the switch needs an exclusive lock and
    fails at once while another process opens the same new file, and WAL is persistent, so only the first
    opener of a new file switches it. NORMAL sync is durable across process crashes in WAL mode."""
    db.execute("PRAGMA busy_timeout=30000")
    if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
        db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
