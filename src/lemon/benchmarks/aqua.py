"""AQuA-RAT: algebraic word problems with five lettered options (A-E); the answer is a letter.

| split | role   | size | definition                                                    |
|-------|--------|-----:|---------------------------------------------------------------|
| test  | eval * |  254 | upstream `test.json` (the paper's set)                        |
| dev   | train  |  254 | upstream `dev.json` minus questions also in `test` (none)     |

The upstream `.json` files are JSON Lines, and options are written "A)125".

Workers get 1,024 tokens a reply here, not LEMON's 384: at 384, 33 of 60 chain-of-thought replies at `large`
(the first 30 test items x 2 seeds) were cut, 27 named no option, and CoT scored 21.7 % against vanilla's
36.7 %: the cells measured the cap, not the methods (docs/results.md, the six-benchmark table).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from lemon.benchmarks.answers import CHOICE
from lemon.benchmarks.base import DataBenchmark, Item, Source, SplitDef
from lemon.benchmarks.files import JSONL, data_error, json_lines, row_field

_OPTION = re.compile(r"^\s*([A-E])\s*\)\s?(.*)$", re.DOTALL)


def _choices(options: list[object], path: Path, where: str, fmt: str) -> list[str]:
    choices = []
    for j, opt in enumerate(options):
        m = _OPTION.match(opt) if isinstance(opt, str) else None
        if not m or m.group(1) != "ABCDE"[j]:
            raise data_error(path, f"{where}: option {j} is not of the form '{'ABCDE'[j]})text'", fmt)
        choices.append(m.group(2).strip())
    return choices


def _parser(split: str) -> Callable[[Path, str], list[Item]]:
    def parse(path: Path, fmt: str) -> list[Item]:
        items = []
        for i, row in enumerate(json_lines(path, fmt)):
            where = f"line {i + 1}"
            q = row_field(row, "question", str, path, where, fmt)
            options = row_field(row, "options", list, path, where, fmt)
            correct = row_field(row, "correct", str, path, where, fmt).strip()
            choices = _choices(options, path, where, fmt)
            if correct not in "ABCDE"[: len(choices)] or len(correct) != 1:
                raise data_error(path, f"{where}: 'correct' must be one of the option letters", fmt)
            items.append(Item(f"aqua/{split}/{i}", q.strip(), correct, tuple(choices),
                              meta={"rationale": row.get("rationale", "")}))
        return items

    return parse


AQUA = DataBenchmark(
    name="aqua",
    answers=CHOICE,
    sources={s: Source(f"aqua/{s}.json", f'{JSONL} of {{"question", "options": ["A)..", ...], "correct"}}',
                       _parser(s)) for s in ("test", "dev")},
    reply_tokens=1024,
    splits={
        "test": SplitDef("test", "eval", 254, description="upstream AQuA test.json"),
        "dev": SplitDef("dev", "train", 254, disjoint_from=("test",),
                        description="upstream AQuA dev.json minus questions in test"),
    },
    default_split="test",
    train_split="dev",
)
