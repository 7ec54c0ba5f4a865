"""MMLU: four-option questions in 57 subjects; the answer is a letter (A-D).

| split | role   |  size | definition                                                       |
|-------|--------|------:|------------------------------------------------------------------|
| val   | eval * |  1531 | upstream `val/` (the paper's set)                                |
| test  | eval   | 14042 | upstream `test/`                                                 |
| dev   | train  |   279 | upstream `dev/` (285) minus 6 whose question text is in val/test |

Each split is a folder of headerless CSVs `<subject>_<split>.csv` whose fields hold commas and newlines.

Order: round-robin over the subjects (row 0 of every subject in name order, then row 1, ...). The upstream files
are one subject each, so in file order the first 30 `val` items were abstract algebra, anatomy and 5 astronomy
questions; interleaved, the first n items of a split span min(n, 57) subjects, and an evaluation of the first
n items samples the whole benchmark. Item ids name subject and row, so they do not depend on the order.

Workers get 1,024 tokens a reply here, not LEMON's 384: at 384, 15 of 60 chain-of-thought replies at `large`
(the first 30 `val` items x 2 seeds) were cut, 8 of them before naming an option (docs/results.md).
"""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Callable
from pathlib import Path

from lemon.benchmarks.answers import CHOICE
from lemon.benchmarks.base import DataBenchmark, Item, Source, SplitDef
from lemon.benchmarks.files import data_error, read_bytes


def _parser(split: str) -> Callable[[Path, str], list[Item]]:
    def parse(folder: Path, fmt: str) -> list[Item]:
        suffix = f"_{split}.csv"
        files = sorted(folder.glob(f"*{suffix}")) if folder.is_dir() else []
        if not files:
            raise data_error(folder, f"missing or has no *{suffix} files", fmt)
        by_subject = []
        for path in files:
            subject = path.name[: -len(suffix)]
            try:
                rows = list(csv.reader(io.StringIO(read_bytes(path, fmt).decode("utf-8"), newline="")))
            except (UnicodeDecodeError, csv.Error) as exc:
                raise data_error(path, f"unreadable CSV ({exc})", fmt) from None
            by_subject.append([_item(split, subject, i, row, path, fmt) for i, row in enumerate(rows)])
        return [item for rank in itertools.zip_longest(*by_subject) for item in rank if item is not None]

    return parse


def _item(split: str, subject: str, i: int, row: list[str], path: Path, fmt: str) -> Item:
    if len(row) != 6 or row[5].strip() not in ("A", "B", "C", "D"):
        raise data_error(path, f"row {i + 1} has {len(row)} fields or a bad answer letter", fmt)
    return Item(f"mmlu/{split}/{subject}/{i}", row[0].strip(), row[5].strip(), tuple(c.strip() for c in row[1:5]),
                meta={"subject": subject})


MMLU = DataBenchmark(
    name="mmlu",
    answers=CHOICE,
    reply_tokens=1024,
    sources={s: Source(f"mmlu/{s}", f"a folder of headerless CSVs <subject>_{s}.csv with rows "
                                    "question,A,B,C,D,answer", _parser(s)) for s in ("dev", "val", "test")},
    splits={
        "val": SplitDef("val", "eval", 1531, description="upstream MMLU val/ (57 subjects)"),
        "test": SplitDef("test", "eval", 14042, description="upstream MMLU test/ (57 subjects)"),
        "dev": SplitDef("dev", "train", 279, disjoint_from=("val", "test"),
                        description="upstream MMLU dev/ minus questions whose text is in val or test"),
    },
    default_split="val",
    train_split="dev",
)
