"""Reading upstream benchmark files: guarded, bounded, and with one-line errors naming file and format.

Why: each upstream format has its own quirks (GSM8K's `#### ` answers with thousands separators, SVAMP's
Body + Question, AQuA's JSON Lines in a `.json` file with "A)125" options, MultiArith's padded questions,
MMLU's headerless CSVs whose fields contain commas and newlines, HumanEval's gzip). Each benchmark's file
parses its own format with these helpers, so a missing or malformed file is a one-line `DataError` naming the
file and the expected format instead of a KeyError deep inside an evaluation.

Files are read from `lemon.paths.data_dir()` (explicit argument, else `LEMON_DATA_DIR`, else `./data`) with
the layout `lemon data fetch` gives it (`lemon.benchmarks.sources`); a missing file's error names that
command. Parsed files are cached only for the duration of one `load_split` call (a dict passed down), never
globally.

Item ids are stable and readable: `gsm8k/test/17` (0-based line), `svamp/chal-17` (upstream ID),
`aqua/test/3` (0-based line), `multiarith/42` (upstream iIndex), `mmlu/val/anatomy/4` (0-based row of the
subject's CSV), `HumanEval/3` (upstream task_id).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from lemon.benchmarks.sources import fetch_command, owner
from lemon.errors import DataError
from lemon.files import not_regular, read_regular

MAX_DATA_FILE_BYTES = 256 << 20  # the largest upstream file is a few MB
DATA_HINT = ("or set LEMON_DATA_DIR (or pass --data-dir) to the folder holding gsm8k/ svamp/ aqua/ multiarith/ "
             "mmlu/ humaneval/ (see docs/benchmarks.md, \"Getting the data\")")


def data_hint(path: Path, *, missing: bool) -> str:
    """Where to get a missing (or a fresh copy of a bad) data file: the `lemon data fetch` command of the
    benchmark whose folder holds it, into the same data directory, then the other way (point elsewhere)."""
    found = owner(path)
    if found is None:
        return DATA_HINT.removeprefix("or ")
    bench, root = found
    return f"get it with `{fetch_command(bench, root, force=not missing)}`, {DATA_HINT}"


def data_error(path: Path, problem: str, fmt: str) -> DataError:
    """The one-line error of a bad data file: which file, what is wrong, what was expected, how to get it."""
    return DataError(f"{path}: {problem}; expected {fmt}; {data_hint(path, missing=problem.startswith('missing'))}")


def read_bytes(path: Path, fmt: str) -> bytes:
    """A data file through the guarded opener (regular files only, bounded): a FIFO here would hang an eval."""
    if not path.exists():
        raise data_error(path, "missing", fmt)
    try:
        return read_regular(path, limit=MAX_DATA_FILE_BYTES, what="data file", error=DataError)
    except DataError as exc:  # a FIFO or a device is the user's to move: a download would not replace it
        hint = DATA_HINT.removeprefix("or ") if not_regular(path) else data_hint(path, missing=False)
        raise DataError(f"{exc}; {hint}") from None


def read_text(path: Path, fmt: str) -> str:
    """A data file as UTF-8 text, gunzipped when its name ends in .gz."""
    raw = read_bytes(path, fmt)
    try:
        return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise data_error(path, f"unreadable ({type(exc).__name__}: {exc})", fmt) from None


def json_lines(path: Path, fmt: str) -> list[dict[str, Any]]:
    """The objects of a JSON Lines file (blank lines skipped; a file with none is an error)."""
    rows = []
    for n, line in enumerate(read_text(path, fmt).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise data_error(path, f"line {n} is not JSON ({exc.msg})", fmt) from None
        if not isinstance(row, dict):
            raise data_error(path, f"line {n} is not a JSON object", fmt)
        rows.append(row)
    if not rows:
        raise data_error(path, "empty", fmt)
    return rows


def json_array(path: Path, fmt: str) -> list[dict[str, Any]]:
    """The objects of a file holding one non-empty JSON array of objects."""
    try:
        rows = json.loads(read_text(path, fmt))
    except json.JSONDecodeError as exc:
        raise data_error(path, f"not JSON ({exc.msg} at line {exc.lineno})", fmt) from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise data_error(path, "not a non-empty JSON array of objects", fmt)
    return rows


def row_field(row: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path, where: str,
              fmt: str) -> Any:
    """`row[key]` if it has the type `kind` (never a bool), else a one-line error naming `where` in the file."""
    value = row.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise data_error(path, f"{where}: field {key!r} missing or not {getattr(kind, '__name__', kind)}", fmt)
    return value


def number_text(value: float | int | str) -> str:
    """A gold number as text: '18' for 18.0, '2.5' for 2.5, commas removed ('2,125' -> '2125')."""
    if isinstance(value, str):
        value = value.replace(",", "").strip()
        try:
            num = float(value)
        except ValueError:
            return value
    else:
        num = float(value)
    if num.is_integer():
        return str(int(num))
    return repr(num)


JSONL = "JSON Lines"
