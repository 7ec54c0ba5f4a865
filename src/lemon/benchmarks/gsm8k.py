"""GSM8K: grade-school math word problems with a number for an answer (the paper's set: `test`, 1319 items).

| split | role   | size | definition                                                      |
|-------|--------|-----:|-----------------------------------------------------------------|
| test  | eval * | 1319 | upstream `test.jsonl`                                           |
| train | train  | 7473 | upstream `train.jsonl` minus questions also in `test` (none)    |

Upstream answers end with a `#### N` line, N with thousands separators ("2,125"); the gold is N as plain text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from lemon.benchmarks.answers import NUMBER
from lemon.benchmarks.base import DataBenchmark, Item, Source, SplitDef
from lemon.benchmarks.files import JSONL, data_error, json_lines, number_text, row_field

_ANSWER = re.compile(r"####\s*(.+?)\s*$")


def _parser(split: str) -> Callable[[Path, str], list[Item]]:
    def parse(path: Path, fmt: str) -> list[Item]:
        items = []
        for i, row in enumerate(json_lines(path, fmt)):
            q = row_field(row, "question", str, path, f"line {i + 1}", fmt)
            sol = row_field(row, "answer", str, path, f"line {i + 1}", fmt)
            m = _ANSWER.search(sol.strip().splitlines()[-1] if sol.strip() else "")
            if not m:
                raise data_error(path, f"line {i + 1}: answer has no final '#### <number>' line", fmt)
            items.append(Item(f"gsm8k/{split}/{i}", q.strip(), number_text(m.group(1)),
                              meta={"solution": sol}))
        return items

    return parse


GSM8K = DataBenchmark(
    name="gsm8k",
    answers=NUMBER,
    sources={s: Source(f"gsm8k/{s}.jsonl", f'{JSONL} of {{"question", "answer" ending "#### N"}}', _parser(s))
             for s in ("test", "train")},
    splits={
        "test": SplitDef("test", "eval", 1319, description="upstream gsm8k test.jsonl"),
        "train": SplitDef("train", "train", 7473, disjoint_from=("test",),
                          description="upstream gsm8k train.jsonl minus questions in test"),
    },
    default_split="test",
    train_split="train",
)
