"""The LLM cache's portable form: one gzip file of JSON lines, a header, then one completion or score a line.

Why: the sample bank (issue 24) is nothing but the cache's deterministic completions and reply scores, hours
of CPU to draw, and files outside the repository do not always survive a change of machine (on 2026-11-25
every bank and store under LEMON_HOME was gone). Exported to one compressed file it can be committed (the
issue allows 20 MB) and imported on a new machine in seconds. The export is byte-stable (rows sorted by key,
no gzip timestamp), so re-exporting an unchanged cache changes nothing in git. An import is validated in
full before anything is written and then adds, in one transaction, only the keys the cache lacks: it never
overwrites what a machine has drawn, and a bad file changes nothing.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lemon.errors import StorageError
from lemon.files import write_output
from lemon.llm.cache import SQLiteCache

FORMAT = "lemon-llm-cache/1"
_KEY = re.compile(r"^[0-9a-f]{64}$")

Completions = list[tuple[str, str, str, int, int]]
Scores = list[tuple[str, str, float]]


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


def import_cache(cache: SQLiteCache, path: Path) -> Transfer:
    """Add the rows of export `path` that `cache` lacks; the file is checked in full before any write."""
    completions, scores = read_export(path)
    added = cache.add_missing(completions, scores)
    return Transfer(added[0], added[1], kept=len(completions) + len(scores) - sum(added))


def read_export(path: Path) -> tuple[Completions, Scores]:
    """The rows of an export, or a one-line StorageError naming the file, the line and the fix."""
    try:
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    except FileNotFoundError:
        raise StorageError(f"no cache export at {path}; give the path of a file `lemon cache export` wrote"
                           ) from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise StorageError(f"{path} is not a cache export ({exc}); give a file `lemon cache export` wrote"
                           ) from None
    # "\n" only: str.splitlines also breaks at U+0085 and U+2028, which a model's text may hold unescaped
    lines = text.removesuffix("\n").split("\n") if text else []
    header = _parse(path, 1, lines[0] if lines else "")
    if header.get("format") != FORMAT:
        raise StorageError(f"{path}: line 1 is not a {FORMAT} header; give a file `lemon cache export` wrote")
    completions: Completions = []
    scores: Scores = []
    for number, line in enumerate(lines[1:], start=2):
        row = _parse(path, number, line)
        if "completion" in row:
            completions.append(_completion(path, number, row["completion"]))
        elif "score" in row:
            scores.append(_score(path, number, row["score"]))
        else:
            _bad(path, number, "neither a completion nor a score")
    if (len(completions), len(scores)) != (header.get("completions"), header.get("scores")):
        raise StorageError(f"{path}: the header counts {header.get('completions')} completions and "
                           f"{header.get('scores')} scores, the file holds {len(completions)} and {len(scores)} "
                           "(truncated?); export it again")
    return completions, scores


def _parse(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        _bad(path, number, f"not JSON ({exc.msg})")
    if not isinstance(row, dict):
        _bad(path, number, "not a JSON object")
    return row


def _completion(path: Path, number: int, row: Any) -> tuple[str, str, str, int, int]:
    ok = (isinstance(row, list) and len(row) == 5 and _is_key(row[0]) and isinstance(row[1], str)
          and isinstance(row[2], str) and all(_is_count(v) for v in row[3:]))
    if not ok:
        _bad(path, number, "a completion must be [key, model, text, prompt_tokens, completion_tokens]")
    return row[0], row[1], row[2], row[3], row[4]


def _score(path: Path, number: int, row: Any) -> tuple[str, str, float]:
    ok = (isinstance(row, list) and len(row) == 3 and _is_key(row[0]) and isinstance(row[1], str)
          and isinstance(row[2], int | float) and not isinstance(row[2], bool) and math.isfinite(row[2]))
    if not ok:
        _bad(path, number, "a score must be [key, model, finite logprob]")
    return row[0], row[1], float(row[2])


def _is_key(value: Any) -> bool:
    return isinstance(value, str) and bool(_KEY.match(value))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _bad(path: Path, number: int, why: str) -> Any:
    raise StorageError(f"{path}: line {number}: {why}; nothing was imported (export the cache again)")
