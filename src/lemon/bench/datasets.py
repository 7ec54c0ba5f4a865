"""Benchmark items from the upstream data files, parsed into one `Item` shape for every benchmark.

Why: each upstream format has its own quirks (GSM8K's `#### ` answers with thousands separators, SVAMP's
Body + Question, AQuA's JSON Lines in a `.json` file with "A)125" options, MultiArith's padded questions,
MMLU's headerless CSVs whose fields contain commas and newlines, HumanEval's gzip). They are handled here
once, and a missing or malformed file is a one-line `DataError` naming the file and the expected format
instead of a KeyError deep inside an evaluation.

`load_source(benchmark, source)` reads one upstream file (or folder) as is; `load_split(benchmark, split)`
applies a named split from `lemon.bench.splits` on top. Files are read from `lemon.paths.data_dir()`
(explicit argument, else `LEMON_DATA_DIR`, else `./data`) with the layout of `shared/data`. Parsed files are
cached only for the duration of one `load_split` call (a dict passed down), never globally.

Item ids are stable and readable: `gsm8k/test/17` (0-based line), `svamp/chal-17` (upstream ID),
`aqua/test/3` (0-based line), `multiarith/42` (upstream iIndex), `mmlu/val/anatomy/4` (0-based row of the
subject's CSV), `HumanEval/3` (upstream task_id).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lemon.bench import splits as splitdefs
from lemon.errors import DataError, LemonError
from lemon.files import read_regular
from lemon.paths import data_dir as resolve_data_dir

log = logging.getLogger(__name__)

MAX_DATA_FILE_BYTES = 256 << 20  # the largest upstream file is a few MB
DATA_HINT = ("set LEMON_DATA_DIR (or pass --data-dir) to the folder holding gsm8k/ svamp/ aqua/ multiarith/ "
             "mmlu/ humaneval/ (see shared/data/README.md)")


@dataclass(frozen=True)
class Item:
    """One benchmark question with its gold answer as text.

    `answer`: a number as text ("18", "-2.5") for number benchmarks, a letter "A".."E" for choice ones, and
    the HumanEval test code for code. `choices`: the option texts, without their letter prefixes, in
    letter order. `meta`: benchmark specifics (HumanEval prompt/test/entry_point, MMLU subject, ...).
    """

    id: str
    question: str
    answer: str
    choices: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class _Source:
    path: str  # relative to the data dir
    fmt: str   # the expected format, for error messages
    parse: Callable[[Path, str], list[Item]]


def _fail(path: Path, problem: str, fmt: str) -> DataError:
    return DataError(f"{path}: {problem}; expected {fmt}; {DATA_HINT}")


def _read_bytes(path: Path, fmt: str) -> bytes:
    """A data file through the guarded opener (regular files only, bounded): a FIFO here would hang an eval."""
    if not path.exists():
        raise _fail(path, "missing", fmt)
    try:
        return read_regular(path, limit=MAX_DATA_FILE_BYTES, what="data file", error=DataError)
    except DataError as exc:
        raise DataError(f"{exc}; {DATA_HINT}") from None


def _read_text(path: Path, fmt: str) -> str:
    raw = _read_bytes(path, fmt)
    try:
        return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise _fail(path, f"unreadable ({type(exc).__name__}: {exc})", fmt) from None


def _json_lines(path: Path, fmt: str) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(_read_text(path, fmt).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail(path, f"line {n} is not JSON ({exc.msg})", fmt) from None
        if not isinstance(row, dict):
            raise _fail(path, f"line {n} is not a JSON object", fmt)
        rows.append(row)
    if not rows:
        raise _fail(path, "empty", fmt)
    return rows


def _json_array(path: Path, fmt: str) -> list[dict[str, Any]]:
    try:
        rows = json.loads(_read_text(path, fmt))
    except json.JSONDecodeError as exc:
        raise _fail(path, f"not JSON ({exc.msg} at line {exc.lineno})", fmt) from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise _fail(path, "not a non-empty JSON array of objects", fmt)
    return rows


def _field(row: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path, where: str,
           fmt: str) -> Any:
    value = row.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _fail(path, f"{where}: field {key!r} missing or not {getattr(kind, '__name__', kind)}", fmt)
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


_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$")


def _gsm8k(split: str) -> Callable[[Path, str], list[Item]]:
    def parse(path: Path, fmt: str) -> list[Item]:
        items = []
        for i, row in enumerate(_json_lines(path, fmt)):
            q = _field(row, "question", str, path, f"line {i + 1}", fmt)
            sol = _field(row, "answer", str, path, f"line {i + 1}", fmt)
            m = _GSM8K_ANSWER.search(sol.strip().splitlines()[-1] if sol.strip() else "")
            if not m:
                raise _fail(path, f"line {i + 1}: answer has no final '#### <number>' line", fmt)
            items.append(Item(f"gsm8k/{split}/{i}", q.strip(), number_text(m.group(1)),
                              meta={"solution": sol}))
        return items

    return parse


def _svamp(path: Path, fmt: str) -> list[Item]:
    items = []
    for i, row in enumerate(_json_array(path, fmt)):
        where = f"object {i}"
        body = _field(row, "Body", str, path, where, fmt)
        question = _field(row, "Question", str, path, where, fmt)
        answer = _field(row, "Answer", (int, float), path, where, fmt)
        item_id = _field(row, "ID", str, path, where, fmt)
        items.append(Item(f"svamp/{item_id}", f"{body.strip()} {question.strip()}", number_text(answer),
                          meta={"equation": row.get("Equation"), "type": row.get("Type")}))
    return items


_AQUA_OPTION = re.compile(r"^\s*([A-E])\s*\)\s?(.*)$", re.DOTALL)


def _aqua(split: str) -> Callable[[Path, str], list[Item]]:
    def parse(path: Path, fmt: str) -> list[Item]:
        items = []
        for i, row in enumerate(_json_lines(path, fmt)):
            where = f"line {i + 1}"
            q = _field(row, "question", str, path, where, fmt)
            options = _field(row, "options", list, path, where, fmt)
            correct = _field(row, "correct", str, path, where, fmt).strip()
            choices = []
            for j, opt in enumerate(options):
                m = _AQUA_OPTION.match(opt) if isinstance(opt, str) else None
                if not m or m.group(1) != "ABCDE"[j]:
                    raise _fail(path, f"{where}: option {j} is not of the form '{'ABCDE'[j]})text'", fmt)
                choices.append(m.group(2).strip())
            if correct not in "ABCDE"[: len(choices)] or len(correct) != 1:
                raise _fail(path, f"{where}: 'correct' must be one of the option letters", fmt)
            items.append(Item(f"aqua/{split}/{i}", q.strip(), correct, tuple(choices),
                              meta={"rationale": row.get("rationale", "")}))
        return items

    return parse


def _multiarith(path: Path, fmt: str) -> list[Item]:
    items = []
    for i, row in enumerate(_json_array(path, fmt)):
        where = f"object {i}"
        q = _field(row, "sQuestion", str, path, where, fmt)
        sols = _field(row, "lSolutions", list, path, where, fmt)
        index = _field(row, "iIndex", int, path, where, fmt)
        if not sols or not isinstance(sols[0], int | float):
            raise _fail(path, f"{where}: 'lSolutions' must start with a number", fmt)
        items.append(Item(f"multiarith/{index}", q.strip(), number_text(sols[0]),
                          meta={"equations": row.get("lEquations", [])}))
    return items


def _mmlu(split: str) -> Callable[[Path, str], list[Item]]:
    def parse(folder: Path, fmt: str) -> list[Item]:
        suffix = f"_{split}.csv"
        files = sorted(folder.glob(f"*{suffix}")) if folder.is_dir() else []
        if not files:
            raise _fail(folder, f"missing or has no *{suffix} files", fmt)
        items = []
        for path in files:
            subject = path.name[: -len(suffix)]
            try:
                rows = list(csv.reader(io.StringIO(_read_bytes(path, fmt).decode("utf-8"), newline="")))
            except (UnicodeDecodeError, csv.Error) as exc:
                raise _fail(path, f"unreadable CSV ({exc})", fmt) from None
            for i, row in enumerate(rows):
                if len(row) != 6 or row[5].strip() not in ("A", "B", "C", "D"):
                    raise _fail(path, f"row {i + 1} has {len(row)} fields or a bad answer letter", fmt)
                items.append(Item(f"mmlu/{split}/{subject}/{i}", row[0].strip(), row[5].strip(),
                                  tuple(c.strip() for c in row[1:5]), meta={"subject": subject}))
        return items

    return parse


def _humaneval(path: Path, fmt: str) -> list[Item]:
    items = []
    for i, row in enumerate(_json_lines(path, fmt)):
        where = f"line {i + 1}"
        fields = {k: _field(row, k, str, path, where, fmt)
                  for k in ("task_id", "prompt", "canonical_solution", "test", "entry_point")}
        items.append(Item(fields["task_id"], fields["prompt"], fields["test"], meta=fields))
    return items


_JSONL = "JSON Lines"
SOURCES: Mapping[str, Mapping[str, _Source]] = MappingProxyType({
    "gsm8k": {s: _Source(f"gsm8k/{s}.jsonl", f'{_JSONL} of {{"question", "answer" ending "#### N"}}',
                         _gsm8k(s)) for s in ("test", "train")},
    "svamp": {"all": _Source("svamp/SVAMP.json", 'a JSON array of {"ID", "Body", "Question", "Answer"}',
                             _svamp)},
    "aqua": {s: _Source(f"aqua/{s}.json", f'{_JSONL} of {{"question", "options": ["A)..", ...], "correct"}}',
                        _aqua(s)) for s in ("test", "dev")},
    "multiarith": {"all": _Source("multiarith/MultiArith.json",
                                  'a JSON array of {"iIndex", "sQuestion", "lSolutions"}', _multiarith)},
    "mmlu": {s: _Source(f"mmlu/{s}", f"a folder of headerless CSVs <subject>_{s}.csv with rows "
                                     "question,A,B,C,D,answer", _mmlu(s)) for s in ("dev", "val", "test")},
    "humaneval": {"all": _Source("humaneval/HumanEval.jsonl.gz", f"gzip {_JSONL} of {{task_id, prompt, "
                                 "canonical_solution, test, entry_point}", _humaneval)},
})


def load_source(benchmark: str, source: str, data_dir: str | os.PathLike[str] | None = None) -> list[Item]:
    """All items of one upstream file (or MMLU folder), in file order."""
    try:
        src = SOURCES[benchmark][source]
    except KeyError:
        raise LemonError(f"unknown source {benchmark}/{source}; valid: "
                         f"{', '.join(f'{b}/{s}' for b in SOURCES for s in SOURCES[b])}") from None
    path = resolve_data_dir(data_dir) / src.path
    items = src.parse(path, src.fmt)
    log.debug("loaded %d items from %s", len(items), path)
    return items


def load_split(benchmark: str, split: str, data_dir: str | os.PathLike[str] | None = None) -> list[Item]:
    """The items of the named split (see `lemon.bench.splits`), in file order."""
    cache: dict[str, list[Item]] = {}

    def source(name: str) -> list[Item]:
        if name not in cache:
            cache[name] = load_source(benchmark, name, data_dir)
        return cache[name]

    def items_of(name: str) -> list[Item]:
        d = splitdefs.get_split(benchmark, name)
        excluded: set[str] = set()
        for other in d.disjoint_from:
            excluded.update(splitdefs.question_key(it.question) for it in items_of(other))
        return splitdefs.select_items(benchmark, d, source(d.source), excluded)

    return items_of(split)
