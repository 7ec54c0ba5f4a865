"""`lemon cache import` against hostile files (issue 52, item 3): the file is read as a stream within bounds, a
reply no larger than the HTTP backend accepts, a file that contradicts itself is refused, the counts are the
import's own, and a refused import is one line naming the FILE (never advice to delete an intact cache) that
leaves the cache exactly as it was.

On the old code (the file decompressed whole) a FIFO hung, /dev/zero and gzip bombs ended in MemoryError
tracebacks (here under a memory cap, so that a regression fails fast instead of taking the machine), and a
100 MB reply or a key given two values was imported."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import resource
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lemon.errors import StorageError
from lemon.llm.base import Completion
from lemon.llm.cache import SQLiteCache
from lemon.llm.cache_file import FORMAT, Bounds, Transfer, import_cache
from lemon.llm.openai_compat import MAX_BODY_BYTES
from tests.cli.test_cli_core import assert_clean_error

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 120.0  # a process start on a loaded 2-core machine; a hang never ends
MEMORY_CAP = 2 << 30  # address space of one `lemon` process: the new code needs a fraction, the old ran past it


def capped_lemon(*args: str, home: Path, timeout: float = DEADLINE_S) -> subprocess.CompletedProcess[str]:
    """`lemon ARGS` in a real process under MEMORY_CAP of address space and a deadline: reading without bounds
    ends in a MemoryError (or TimeoutExpired for a hang), never in a machine out of memory."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    env = {**os.environ, "LEMON_HOME": str(home), "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "lemon.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=cap)


def _key(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def _header(completions: int, scores: int = 0) -> bytes:
    return (json.dumps({"format": FORMAT, "completions": completions, "scores": scores}) + "\n").encode()


def _completion(key: str, text: str) -> bytes:
    return (json.dumps({"completion": [key, "m", text, 1, 2]}, ensure_ascii=False) + "\n").encode()


def _bomb(path: Path, head: bytes, line: bytes, copies: int) -> Path:
    """A gzip file: `head`, then `line` `copies` times, as one member per copy of one compressed `line`
    (a valid multi-member gzip: what it decompresses to is `copies` times what it weighs on disk)."""
    member = gzip.compress(line, compresslevel=9, mtime=0)
    with path.open("wb") as fh:
        fh.write(gzip.compress(head, mtime=0))
        for _ in range(copies):
            fh.write(member)
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A LEMON_HOME whose LLM cache holds one completion that every refused import must leave as it was."""
    path = tmp_path / "home"
    cache = SQLiteCache(path / "llm-cache.sqlite")
    cache.put(_key(0), Completion("drawn here", 5, 6, 0.0, "m"))
    cache.close()
    return path


def _rows(home: Path) -> list[tuple[str, str, str, int, int]]:
    cache = SQLiteCache(home / "llm-cache.sqlite")
    try:
        return cache.completion_rows()
    finally:
        cache.close()


KEPT = [(_key(0), "m", "drawn here", 5, 6)]


def _assert_refused(proc: subprocess.CompletedProcess[str], expected: str, home: Path) -> None:
    """One line naming the problem, exit 2, the cache as it was and not blamed."""
    assert_clean_error(proc, expected)
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1, proc.stderr
    assert "delete" not in proc.stderr and "llm-cache.sqlite" not in proc.stderr, proc.stderr
    assert _rows(home) == KEPT


# ---- files that are not files, and bombs: one line, never a hang or a MemoryError ----------------------


def test_a_fifo_is_refused_at_once(tmp_path: Path, home: Path) -> None:
    fifo = tmp_path / "bank.jsonl.gz"
    os.mkfifo(fifo)  # no writer: opening it for reading would wait forever (the old code did)
    _assert_refused(capped_lemon("cache", "import", str(fifo), home=home), "a FIFO (named pipe)", home)


def test_a_device_is_refused_at_once(home: Path) -> None:
    _assert_refused(capped_lemon("cache", "import", "/dev/zero", home=home), "a character device", home)


def test_a_gzip_bomb_of_newlines_is_refused_at_its_first_bad_line(tmp_path: Path, home: Path) -> None:
    bomb = _bomb(tmp_path / "bomb.jsonl.gz", _header(1), b"\n" * (16 << 20), copies=64)  # 1 GiB of newlines
    assert bomb.stat().st_size < 2 << 20
    _assert_refused(capped_lemon("cache", "import", str(bomb), home=home), "line 2: not JSON", home)


def test_a_gzip_bomb_of_valid_lines_is_refused_past_the_total_bound(tmp_path: Path, home: Path) -> None:
    """Every line valid (one row of the largest reply allowed, repeated): only the bound on the whole
    decompressed file stops it, at 1 GiB."""
    line = _completion(_key(1), "a" * MAX_BODY_BYTES)
    copies = Bounds().total // len(line) + 2
    bomb = _bomb(tmp_path / "bomb.jsonl.gz", _header(copies), line, copies)
    assert bomb.stat().st_size < 4 << 20
    _assert_refused(capped_lemon("cache", "import", str(bomb), home=home), "more than 1 GiB once decompressed",
                    home)


def test_a_100_mb_reply_is_refused_not_replayed(tmp_path: Path, home: Path) -> None:
    file = _bomb(tmp_path / "bank.jsonl.gz", _header(1), _completion(_key(1), "x" * 100_000_000), copies=1)
    _assert_refused(capped_lemon("cache", "import", str(file), home=home), "line 2: longer than 8.0625 MiB", home)


def test_a_file_that_gives_one_key_two_values_is_refused(tmp_path: Path, home: Path) -> None:
    file = _bomb(tmp_path / "bank.jsonl.gz", _header(3),
                 _completion(_key(1), "one") + _completion(_key(2), "two") + _completion(_key(1), "other"), 1)
    _assert_refused(capped_lemon("cache", "import", str(file), home=home),
                    "line 4: its key was given another value at line 2", home)


# ---- the library: the reply bound, rows of the wrong shape, counts, the committed bank -----------------


def _import_refused(tmp_path: Path, content: bytes, expected: str) -> None:
    file = tmp_path / "bank.jsonl.gz"
    file.write_bytes(gzip.compress(content))
    cache = SQLiteCache(tmp_path / "c.sqlite")
    cache.put(_key(0), Completion("drawn here", 5, 6, 0.0, "m"))
    with pytest.raises(StorageError) as info:
        import_cache(cache, file)
    message = str(info.value)
    assert expected in message and "\n" not in message and str(file) in message, message
    assert "delete" not in message and str(cache.path) not in message
    assert cache.completion_rows() == KEPT and cache.score_rows() == []


def test_a_reply_of_8_mib_is_imported_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    cache = SQLiteCache(tmp_path / "ok.sqlite")
    file = tmp_path / "ok.jsonl.gz"
    file.write_bytes(gzip.compress(_header(1) + _completion(_key(1), "é" * (MAX_BODY_BYTES // 2))))
    assert import_cache(cache, file).completions == 1
    _import_refused(tmp_path, _header(1) + _completion(_key(1), "é" * (MAX_BODY_BYTES // 2) + "x"),
                    "line 2: its reply is larger than 8 MiB")


BIG = 10**30
HOSTILE_ROWS = [
    # a key with a newline after its 64 digits ("$" matched before it)
    (_header(1) + json.dumps({"completion": [_key(1) + "\n", "m", "t", 1, 2]}).encode() + b"\n",
     "line 2: a completion must be"),
    # counts SQLite cannot hold (OverflowError traceback)
    (_header(1) + json.dumps({"completion": [_key(1), "m", "t", BIG, 2]}).encode() + b"\n",
     "line 2: a completion must be"),
    # a logprob too large for a float (math.isfinite raised OverflowError)
    (_header(0, 1) + b'{"score": ["' + _key(1).encode() + b'", "m", -1' + b"0" * 400 + b"]}\n",
     "line 2: a score must be"),
    # a lone surrogate, which UTF-8 (and so SQLite) cannot hold (UnicodeEncodeError traceback)
    (_header(1) + b'{"completion": ["' + _key(1).encode() + b'", "m", "\\ud800", 1, 2]}\n',
     "line 2: a completion must be"),
    # nesting past Python's stack (RecursionError traceback)
    (_header(1) + b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 2: not a cache row"),
    # an integer of 5,000 digits (ValueError traceback)
    (_header(1) + b'{"completion": ["' + _key(1).encode() + b'", "m", "t", ' + b"1" * 5000 + b", 2]}\n",
     "line 2: not a cache row"),
    (_header(1) + b"\xff\xfe\n", "line 2: not UTF-8"),
]


@pytest.mark.parametrize(("content", "expected"), HOSTILE_ROWS,
                         ids=["key-newline", "huge-count", "huge-logprob", "surrogate", "deep", "digits", "not-utf8"])
def test_a_row_of_the_wrong_shape_is_one_line_and_adds_nothing(tmp_path: Path, content: bytes, expected: str
                                                               ) -> None:
    _import_refused(tmp_path, content, expected)


def test_a_key_given_twice_with_the_same_value_is_imported_once(tmp_path: Path) -> None:
    file = tmp_path / "bank.jsonl.gz"
    file.write_bytes(gzip.compress(_header(2) + _completion(_key(1), "same") * 2))
    done = import_cache(SQLiteCache(tmp_path / "c.sqlite"), file)
    assert (done.completions, done.scores, done.kept) == (1, 0, 0)


def test_the_counts_are_the_imports_own_not_another_writers(tmp_path: Path) -> None:
    """Another connection commits a row while the import waits for the write lock: the old code counted the
    cache's rows before and after, so that row was reported as imported."""
    path = tmp_path / "c.sqlite"
    cache = SQLiteCache(path)
    file = tmp_path / "bank.jsonl.gz"
    file.write_bytes(gzip.compress(_header(1) + _completion(_key(1), "imported")))
    other = sqlite3.connect(path, isolation_level=None, timeout=30)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO completions VALUES (?, 'm', 'theirs', 1, 1, 0)", (_key(2),))
    waiting = threading.Event()
    cache._conn.set_trace_callback(lambda sql: waiting.set() if sql.startswith("BEGIN") else None)
    result: list[Transfer] = []
    worker = threading.Thread(target=lambda: result.append(import_cache(cache, file)))
    worker.start()
    assert waiting.wait(30), "the import never asked for the write lock"
    worker.join(0.3)  # the import is now in SQLite's busy handler, waiting for `other`
    other.execute("COMMIT")
    worker.join(60)
    other.close()
    (done,) = result
    assert (done.completions, done.scores, done.kept) == (1, 0, 0), done
    assert len(cache.completion_rows()) == 2


def test_a_busy_cache_is_said_to_be_busy_not_damaged(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = SQLiteCache(path)
    file = tmp_path / "bank.jsonl.gz"
    file.write_bytes(gzip.compress(_header(1) + _completion(_key(1), "imported")))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    cache._conn.execute("PRAGMA busy_timeout=50")  # 30 s in use
    try:
        with pytest.raises(StorageError, match="is busy") as info:
            import_cache(cache, file)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert "delete" not in str(info.value) and cache.completion_rows() == []


def test_the_committed_bank_still_imports_whole(tmp_path: Path) -> None:
    bank = REPO / "experiments" / "bank" / "cpu.jsonl.gz"
    with gzip.open(bank, "rt", encoding="utf-8") as fh:
        header = json.loads(fh.readline())
    done = import_cache(SQLiteCache(tmp_path / "c.sqlite"), bank)
    assert (done.completions, done.scores, done.kept) == (header["completions"], header["scores"], 0)
