"""MultiArith: multi-step arithmetic word problems; a number for an answer.

| split | role      | size | definition                                          |
|-------|-----------|-----:|-----------------------------------------------------|
| test  | eval *    |  500 | `MultiArith.json` minus the seeded hold-out         |
| train | train     |  100 | seeded hold-out of `MultiArith.json`                |
| all   | reference |  600 | the whole file (the paper's set; overlaps `train`)  |

No train split upstream: one is held out of the file (20 questions are duplicated; a duplicate group never
straddles train and test, see `lemon.benchmarks.splits`).
"""

from __future__ import annotations

from pathlib import Path

from lemon.benchmarks.answers import NUMBER
from lemon.benchmarks.base import DataBenchmark, Item, Source
from lemon.benchmarks.files import data_error, json_array, number_text, row_field
from lemon.benchmarks.splits import holdout_splits


def _parse(path: Path, fmt: str) -> list[Item]:
    items = []
    for i, row in enumerate(json_array(path, fmt)):
        where = f"object {i}"
        q = row_field(row, "sQuestion", str, path, where, fmt)
        sols = row_field(row, "lSolutions", list, path, where, fmt)
        index = row_field(row, "iIndex", int, path, where, fmt)
        if not sols or not isinstance(sols[0], int | float):
            raise data_error(path, f"{where}: 'lSolutions' must start with a number", fmt)
        items.append(Item(f"multiarith/{index}", q.strip(), number_text(sols[0]),
                          meta={"equations": row.get("lEquations", [])}))
    return items


MULTIARITH = DataBenchmark(
    name="multiarith",
    answers=NUMBER,
    sources={"all": Source("multiarith/MultiArith.json", 'a JSON array of {"iIndex", "sQuestion", "lSolutions"}',
                           _parse)},
    splits=holdout_splits("MultiArith.json", 100, 600),
    default_split="test",
    train_split="train",
)
