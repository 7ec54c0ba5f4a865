"""SVAMP: one-unknown arithmetic word problems with varied structure; a number for an answer.

| split | role      | size | definition                                           |
|-------|-----------|-----:|------------------------------------------------------|
| test  | eval *    |  800 | `SVAMP.json` minus the seeded hold-out               |
| train | train     |  200 | seeded hold-out of `SVAMP.json`                      |
| all   | reference | 1000 | the whole file (the paper's set; overlaps `train`)   |

SVAMP has no train split upstream, so one is held out of the file (`lemon.benchmarks.splits`): the default
test split is smaller than the paper's set, and `all` must never evaluate anything trained on `train`.
"""

from __future__ import annotations

from pathlib import Path

from lemon.benchmarks.answers import NUMBER
from lemon.benchmarks.base import DataBenchmark, Item, Source
from lemon.benchmarks.files import json_array, number_text, row_field
from lemon.benchmarks.splits import holdout_splits


def _parse(path: Path, fmt: str) -> list[Item]:
    items = []
    for i, row in enumerate(json_array(path, fmt)):
        where = f"object {i}"
        body = row_field(row, "Body", str, path, where, fmt)
        question = row_field(row, "Question", str, path, where, fmt)
        answer = row_field(row, "Answer", (int, float), path, where, fmt)
        item_id = row_field(row, "ID", str, path, where, fmt)
        items.append(Item(f"svamp/{item_id}", f"{body.strip()} {question.strip()}", number_text(answer),
                          meta={"equation": row.get("Equation"), "type": row.get("Type")}))
    return items


SVAMP = DataBenchmark(
    name="svamp",
    answers=NUMBER,
    sources={"all": Source("svamp/SVAMP.json", 'a JSON array of {"ID", "Body", "Question", "Answer"}', _parse)},
    splits=holdout_splits("SVAMP.json", 200, 1000),
    default_split="test",
    train_split="train",
)
