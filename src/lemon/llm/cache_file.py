"""The LLM cache's portable form: one gzip file of JSON lines, a header, then one completion or score a line.

Why: the sample bank (issue 24) is nothing but the cache's deterministic completions and reply scores, hours
of CPU to draw, and files outside the repository do not always survive a change of machine (on 2026-11-25
every bank and store under LEMON_HOME was gone). Exported to one compressed file it can be committed (the
issue allows 20 MB) and imported on a new machine in seconds. The export is byte-stable (rows sorted by key,
no gzip timestamp), so re-exporting an unchanged cache changes nothing in git. An import is validated in
full before anything is written and then adds, in one transaction, only the keys the cache lacks: it never
overwrites what a machine has drawn, and a bad file changes nothing. The file is not trusted: it is read as a
stream within `Bounds` (a FIFO, a device or a gzip bomb is one line, not a hang or a MemoryError), each reply
no larger than the HTTP backend accepts, and a file that gives one key two values is refused.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from lemon.errors import StorageError
from lemon.files import read_regular, write_output
from lemon.llm.cache import ImportStage, SQLiteCache
from lemon.llm.openai_compat import MAX_BODY_BYTES, MAX_TOKEN_COUNT

FORMAT = "lemon-llm-cache/1"
_KEY = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Bounds:
    """What an import reads at most. The committed bank is 2.3 MB of gzip, 7.9 MB of text in 11,816 lines of at
    most 4.4 kB; the issue allows a bank of 20 MB of gzip, ~70 MB of text at the bank's ratio. A file past
    these is refused in one line: a FIFO hung the import and /dev/zero or a 1 MB gzip bomb ended in a
    MemoryError after 2.6-5.4 GB.

    `file`: the gzip file on disk, read whole (64 MiB: 3 x the 20 MB allowed). `total`: the text once
    decompressed (1 GiB: 14 x the largest bank allowed at the bank's ratio; read as a stream, it costs
    temporary disk in SQLite's temporary files, not memory). `reply`: one completion's text, the 8 MiB the
    HTTP backend takes from any server (a 100 MB completion was imported and would have been replayed as a
    model's reply). `line`: one line, room for such a reply as JSON (escaped no more than its server's JSON had
it) beside its key, model and counts."""

    file: int = 64 << 20
    total: int = 1 << 30
    reply: int = MAX_BODY_BYTES
    line: int = MAX_BODY_BYTES + (64 << 10)


@dataclass(frozen=True)
class Transfer:
    """What an export wrote or an import added (rows already present are `kept`)."""

    completions: int
    scores: int
    kept: int = 0


def export_cache(cache: SQLiteCache, path: Path) -> Transfer:
    """Write every completion and score of `cache` to `path` (gzip JSON lines), atomically."""
    completions, scores = cache.completion_rows(), cache.score_rows()
    lines = [json.dumps({"format": FORMAT, "completions": len(completions), "scores": len(scores)})]
    lines += [json.dumps({"completion": list(row)}, ensure_ascii=False) for row in completions]
    lines += [json.dumps({"score": list(row)}) for row in scores]
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(("\n".join(lines) + "\n").encode("utf-8"))
    write_output(path, buffer.getvalue(), what="the cache export", fix="name another path")
    return Transfer(len(completions), len(scores))


def import_cache(cache: SQLiteCache, path: Path, bounds: Bounds = Bounds()) -> Transfer:
    """Add the rows of export `path` that `cache` lacks, in one transaction once the whole file has passed; a
    refused file is one line naming the file, and the cache is left exactly as it was."""
    raw = read_regular(path, limit=bounds.file, what="cache export", error=StorageError,
                       size_hint="a cache export is a gzip file `lemon cache export` wrote (the bank is 2.3 MB)")
    with cache.staging() as stage:
        _stage_file(path, raw, stage, bounds)
        staged = stage.staged()
        completions, scores = stage.merge()
    return Transfer(completions, scores, kept=staged - completions - scores)


def _stage_file(path: Path, raw: bytes, stage: ImportStage, bounds: Bounds) -> None:
    """Check every line of the export and stage its rows; a StorageError on the first problem."""
    lines = _lines(path, raw, bounds)
    header = _parse(path, 1, next(lines, (1, ""))[1])
    if header.get("format") != FORMAT:
        raise StorageError(f"{path}: line 1 is not a {FORMAT} header; give a file `lemon cache export` wrote")
    counts = [0, 0]
    for number, line in lines:
        row = _parse(path, number, line)
        if "completion" in row:
            earlier = stage.completion(number, _completion(path, number, row["completion"], bounds.reply))
        elif "score" in row:
            earlier = stage.score(number, _score(path, number, row["score"]))
        else:
            _bad(path, number, "neither a completion nor a score")
        if earlier is not None:
            _bad(path, number, f"its key was given another value at line {earlier} (the file contradicts itself)")
        counts["score" in row] += 1
    if tuple(counts) != (header.get("completions"), header.get("scores")):
        raise StorageError(f"{path}: the header counts {header.get('completions')} completions and "
                           f"{header.get('scores')} scores, the file holds {counts[0]} and {counts[1]} "
                           "(truncated?); nothing was imported (export it again)")


def _lines(path: Path, raw: bytes, bounds: Bounds) -> Iterator[tuple[int, str]]:
    """(line number, text) of the decompressed file, streamed a MiB at a time: never more than one line and a
    chunk in memory, refused past the bounds on one line and on the whole file. Lines end at "\n" only
    (str.splitlines also breaks at U+0085 and U+2028, which a model's text may hold unescaped)."""
    number, total, buffer = 0, 0, bytearray()
    with gzip.GzipFile(fileobj=io.BytesIO(raw), mode="rb") as gz:
        while chunk := _chunk(path, gz, number + 1):
            total += len(chunk)
            if total > bounds.total:
                raise StorageError(f"{path} holds more than {_size(bounds.total)} once decompressed (a gzip bomb, "
                                   "or not a cache export: the committed bank holds 8 MB); nothing was imported")
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n", start)) >= 0:
                number += 1
                yield number, _line(path, number, buffer[start:end], bounds)
                start = end + 1
            del buffer[:start]
            if len(buffer) > bounds.line:
                _bad(path, number + 1, f"longer than {_size(bounds.line)} (no cached reply is)")
        if buffer:
            yield number + 1, _line(path, number + 1, buffer, bounds)


def _chunk(path: Path, gz: gzip.GzipFile, number: int) -> bytes:
    """The next MiB of decompressed text (b"" at the end), or one line for a file that is not gzip."""
    try:
        return gz.read(1 << 20)
    except (OSError, EOFError, zlib.error) as exc:
        raise StorageError(f"{path} is not a cache export or is damaged at line {number} ({exc}); nothing was "
                           "imported (give a file `lemon cache export` wrote)") from None


def _line(path: Path, number: int, body: bytearray, bounds: Bounds) -> str:
    if len(body) > bounds.line:
        _bad(path, number, f"longer than {_size(bounds.line)} (no cached reply is)")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        _bad(path, number, "not UTF-8 text")


def _size(n: int) -> str:
    """`n` bytes for a message: 1 GiB, 8 MiB, 8.0625 MiB (below a MiB, in bytes)."""
    for unit, shift in (("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n:,} bytes"


def _parse(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        _bad(path, number, f"not JSON ({exc.msg})")
    except (ValueError, RecursionError) as exc:  # an integer of over 4,300 digits; nesting past the stack
        _bad(path, number, f"not a cache row ({type(exc).__name__}: {str(exc)[:80]})")
    if not isinstance(row, dict):
        _bad(path, number, "not a JSON object")
    return row


def _completion(path: Path, number: int, row: Any, reply_bytes: int) -> tuple[str, str, str, int, int]:
    ok = (isinstance(row, list) and len(row) == 5 and _is_key(row[0]) and _is_text(row[1])
          and _is_text(row[2]) and all(_is_count(v) for v in row[3:]))
    if not ok:
        _bad(path, number, "a completion must be [key, model, text, prompt_tokens, completion_tokens] (text in "
             f"UTF-8, counts 0..{MAX_TOKEN_COUNT})")
    if len(row[2].encode("utf-8")) > reply_bytes:
        _bad(path, number, f"its reply is larger than {_size(reply_bytes)}, more than the HTTP backend accepts from "
             "any server (a cached reply would be replayed as the model's)")
    return row[0], row[1], row[2], row[3], row[4]


def _score(path: Path, number: int, row: Any) -> tuple[str, str, float]:
    ok = (isinstance(row, list) and len(row) == 3 and _is_key(row[0]) and _is_text(row[1])
          and _finite(row[2]) is not None)
    if not ok:
        _bad(path, number, "a score must be [key, model, finite logprob]")
    return row[0], row[1], float(row[2])


def _is_key(value: Any) -> bool:
    return isinstance(value, str) and _KEY.fullmatch(value) is not None


def _is_text(value: Any) -> bool:
    """A str SQLite can store: JSON's "\\ud800" decodes to a lone surrogate, which UTF-8 cannot hold."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT


def _finite(value: Any) -> float | None:
    """`value` as a finite float, or None (a bool, a string, NaN, inf, or an int too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _bad(path: Path, number: int, why: str) -> NoReturn:
    raise StorageError(f"{path}: line {number}: {why}; nothing was imported (export the cache again)")
