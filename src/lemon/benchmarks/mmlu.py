"""MMLU: four-option questions in 57 subjects; the answer is a letter (A-D).

| split | role   |  size | definition                                                       |
|-------|--------|------:|------------------------------------------------------------------|
| val   | eval * |  1531 | upstream `val/` (the paper's set)                                |
| test  | eval   | 14042 | upstream `test/`                                                 |
| dev   | train  |   279 | upstream `dev/` (285) minus 6 whose question text is in val/test |

Each split is a folder of headerless CSVs `<subject>_<split>.csv` whose fields hold commas and newlines.
"""

from __future__ import annotations

import csv
import io
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
        items = []
        for path in files:
            subject = path.name[: -len(suffix)]
            try:
                rows = list(csv.reader(io.StringIO(read_bytes(path, fmt).decode("utf-8"), newline="")))
            except (UnicodeDecodeError, csv.Error) as exc:
                raise data_error(path, f"unreadable CSV ({exc})", fmt) from None
            for i, row in enumerate(rows):
                if len(row) != 6 or row[5].strip() not in ("A", "B", "C", "D"):
                    raise data_error(path, f"row {i + 1} has {len(row)} fields or a bad answer letter", fmt)
                items.append(Item(f"mmlu/{split}/{subject}/{i}", row[0].strip(), row[5].strip(),
                                  tuple(c.strip() for c in row[1:5]), meta={"subject": subject}))
        return items

    return parse


MMLU = DataBenchmark(
    name="mmlu",
    answers=CHOICE,
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
