"""Named, deterministic benchmark splits; every training pool is disjoint from every evaluation split.

Why this module exists: the projects this one learns from mixed training items into test accuracy and left
it unclear which evaluation set a number was computed on. Here every split has a name, a written
definition (`SPLITS`, recorded with results via `split_definition`) and a documented size, and the training
pools are made disjoint from the evaluation splits *by construction*, both by item id and by question text.

A split is drawn from a *source*: one upstream file (or folder) as `lemon.bench.datasets` loads it, e.g.
`gsm8k/test.jsonl`. Sources and the splits built on them:

| benchmark  | split   | role      | size | definition                                                       |
|------------|---------|-----------|-----:|------------------------------------------------------------------|
| gsm8k      | test    | eval *    | 1319 | upstream `test.jsonl` (the paper's set)                          |
| gsm8k      | train   | train     | 7473 | upstream `train.jsonl` minus questions also in an eval split (0) |
| svamp      | test    | eval *    |  800 | `SVAMP.json` minus the seeded hold-out                           |
| svamp      | train   | train     |  200 | seeded hold-out of `SVAMP.json`                                  |
| svamp      | all     | reference | 1000 | the whole file (the paper's set; overlaps `train`)               |
| aqua       | test    | eval *    |  254 | upstream `test.json` (the paper's set)                           |
| aqua       | dev     | train     |  254 | upstream `dev.json` minus questions also in an eval split (0)    |
| multiarith | test    | eval *    |  500 | `MultiArith.json` minus the seeded hold-out                      |
| multiarith | train   | train     |  100 | seeded hold-out of `MultiArith.json`                             |
| multiarith | all     | reference |  600 | the whole file (the paper's set; overlaps `train`)               |
| mmlu       | val     | eval *    | 1531 | upstream `val/` (the paper's set)                                |
| mmlu       | test    | eval      |14042 | upstream `test/`                                                 |
| mmlu       | dev     | train     |  279 | upstream `dev/` (285) minus 6 whose question text is in val/test |
| humaneval  | test    | eval *    |  124 | `HumanEval.jsonl.gz` minus the seeded hold-out                   |
| humaneval  | train   | train     |   40 | seeded hold-out of `HumanEval.jsonl.gz`                          |
| humaneval  | all     | reference |  164 | the whole file (the paper's set; overlaps `train`)               |

(* = `default_split`, the evaluation split used unless one is named.)

MultiArith, SVAMP and HumanEval have no train split upstream, so a hold-out is drawn from the one file.
Consequence, stated plainly: their default test splits (500 / 800 / 124 items) are SMALLER than the full
sets the paper reports on (600 / 1000 / 164), so numbers on them are not directly comparable with published
numbers; the `all` split gives the full set for such comparisons and must never be used to evaluate anything
trained on `train`. Sizes: 100 of 600 MultiArith and 200 of 1000 SVAMP keep five sixths / four fifths for
testing (enough for a useful confidence interval), while arithmetic training data is mostly GSM8K's 7473
items anyway; HumanEval keeps 124 of 164 for testing and holds out 40 (about a quarter), the only code items
available for training.

The hold-out is deterministic and independent of Python's salted `hash()`: items are grouped by normalized
question text (MultiArith has 20 duplicated questions; a group never straddles train and test), each group
is ranked by `sha256(f"{HOLDOUT_SALT}/{benchmark}/{smallest id in the group}")`, and whole groups are taken
in rank order, skipping any group that would overshoot, until exactly `holdout` items are held out.
Training pools with `disjoint_from` drop every item whose normalized question text appears in one of the
named evaluation splits (upstream MMLU dev shares 6 question texts with val/test, some of them generic
like "Which of the following is not a true statement?"; dropping them is the conservative choice).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, Protocol, TypeVar

from lemon.errors import LemonError

HOLDOUT_SALT = "lemon-holdout-v1"

Role = Literal["eval", "train", "reference"]
Selection = Literal["all", "holdout", "rest"]


class HasIdAndQuestion(Protocol):
    """What the split logic needs of an item (`lemon.bench.datasets.Item` satisfies it)."""

    @property
    def id(self) -> str: ...

    @property
    def question(self) -> str: ...


T = TypeVar("T", bound=HasIdAndQuestion)


@dataclass(frozen=True)
class SplitDef:
    """One named split: which source it is drawn from and how items are selected from it."""

    source: str
    role: Role
    size: int
    select: Selection = "all"
    holdout: int = 0
    disjoint_from: tuple[str, ...] = ()
    description: str = ""


def _holdout_splits(what: str, holdout: int, full: int) -> Mapping[str, SplitDef]:
    """`test` (the rest), `train` (the seeded hold-out), `all` (reference): for a file with no train split."""
    held = f"seeded hold-out ({HOLDOUT_SALT}, {holdout} items) of {what}"
    return MappingProxyType({
        "test": SplitDef("all", "eval", full - holdout, "rest", holdout,
                         description=f"{what} minus the {held}"),
        "train": SplitDef("all", "train", holdout, "holdout", holdout, description=f"the {held}"),
        "all": SplitDef("all", "reference", full,
                        description=f"all of {what}; overlaps train (for comparison only)"),
    })


SPLITS: Mapping[str, Mapping[str, SplitDef]] = MappingProxyType({
    "gsm8k": MappingProxyType({
        "test": SplitDef("test", "eval", 1319, description="upstream gsm8k test.jsonl"),
        "train": SplitDef("train", "train", 7473, disjoint_from=("test",),
                          description="upstream gsm8k train.jsonl minus questions in test"),
    }),
    "svamp": _holdout_splits("SVAMP.json", 200, 1000),
    "aqua": MappingProxyType({
        "test": SplitDef("test", "eval", 254, description="upstream AQuA test.json"),
        "dev": SplitDef("dev", "train", 254, disjoint_from=("test",),
                        description="upstream AQuA dev.json minus questions in test"),
    }),
    "multiarith": _holdout_splits("MultiArith.json", 100, 600),
    "mmlu": MappingProxyType({
        "val": SplitDef("val", "eval", 1531, description="upstream MMLU val/ (57 subjects)"),
        "test": SplitDef("test", "eval", 14042, description="upstream MMLU test/ (57 subjects)"),
        "dev": SplitDef("dev", "train", 279, disjoint_from=("val", "test"),
                        description="upstream MMLU dev/ minus questions whose text is in val or test"),
    }),
    "humaneval": _holdout_splits("HumanEval.jsonl.gz", 40, 164),
})

DEFAULT_SPLITS: Mapping[str, str] = MappingProxyType({
    "mmlu": "val", "gsm8k": "test", "aqua": "test", "multiarith": "test", "svamp": "test",
    "humaneval": "test",
})

TRAIN_SPLITS: Mapping[str, str] = MappingProxyType({
    "mmlu": "dev", "gsm8k": "train", "aqua": "dev", "multiarith": "train", "svamp": "train",
    "humaneval": "train",
})


def _benchmark(benchmark: str) -> Mapping[str, SplitDef]:
    try:
        return SPLITS[benchmark]
    except KeyError:
        raise LemonError(f"unknown benchmark {benchmark!r}; valid: {', '.join(sorted(SPLITS))}") from None


def split_names(benchmark: str) -> tuple[str, ...]:
    """The split names defined for `benchmark` (evaluation splits first)."""
    defs = _benchmark(benchmark)
    order = {"eval": 0, "train": 1, "reference": 2}
    return tuple(sorted(defs, key=lambda n: (order[defs[n].role], n != DEFAULT_SPLITS[benchmark], n)))


def get_split(benchmark: str, split: str) -> SplitDef:
    """The definition of `benchmark`/`split`, or a one-line LemonError naming the valid splits."""
    defs = _benchmark(benchmark)
    try:
        return defs[split]
    except KeyError:
        raise LemonError(f"unknown split {split!r} for {benchmark}; valid: "
                         f"{', '.join(split_names(benchmark))}") from None


def default_split(benchmark: str) -> str:
    """The evaluation split used when none is named (the paper's evaluation set, or its hold-out rest)."""
    _benchmark(benchmark)
    return DEFAULT_SPLITS[benchmark]


def train_split(benchmark: str) -> str:
    """The training pool of `benchmark` (disjoint from every evaluation split)."""
    _benchmark(benchmark)
    return TRAIN_SPLITS[benchmark]


def eval_splits(benchmark: str) -> tuple[str, ...]:
    """The splits with role `eval`."""
    return tuple(n for n, d in _benchmark(benchmark).items() if d.role == "eval")


def split_definition(benchmark: str, split: str) -> dict[str, Any]:
    """A JSON-able record of how `benchmark`/`split` is defined (store it with results to name the split)."""
    d = get_split(benchmark, split)
    record: dict[str, Any] = {"benchmark": benchmark, "split": split, "source": d.source, "role": d.role,
                              "size": d.size, "select": d.select, "description": d.description}
    if d.select != "all":
        record.update(holdout=d.holdout, salt=HOLDOUT_SALT)
    if d.disjoint_from:
        record["disjoint_from"] = list(d.disjoint_from)
    return record


def question_key(text: str) -> str:
    """Normalized question text used for disjointness: lower case, whitespace collapsed."""
    return " ".join(text.split()).lower()  # split() and `\s` agree: str.isspace()


def _rank(benchmark: str, item_id: str) -> str:
    return hashlib.sha256(f"{HOLDOUT_SALT}/{benchmark}/{item_id}".encode()).hexdigest()


def holdout_ids(benchmark: str, items: Sequence[HasIdAndQuestion], size: int) -> frozenset[str]:
    """The ids of the seeded hold-out: whole question-text groups in sha256 rank order, `size` items."""
    groups: dict[str, list[str]] = {}
    for item in items:
        groups.setdefault(question_key(item.question), []).append(item.id)
    ranked = sorted(groups.values(), key=lambda ids: _rank(benchmark, min(ids)))
    chosen: list[str] = []
    for ids in ranked:
        if len(chosen) == size:
            break
        if len(chosen) + len(ids) <= size:
            chosen.extend(ids)
    if len(chosen) != size:
        raise LemonError(f"{benchmark}: cannot hold out {size} of {len(items)} items; "
                         "the data file is too small")
    return frozenset(chosen)


def select_items(benchmark: str, definition: SplitDef, items: Sequence[T],
                 excluded_questions: Iterable[str] = ()) -> list[T]:
    """Apply `definition` to the source `items` (in file order); drop items whose question key is excluded."""
    if definition.select == "all":
        chosen = list(items)
    else:
        held = holdout_ids(benchmark, items, definition.holdout)
        keep = definition.select == "holdout"
        chosen = [it for it in items if (it.id in held) == keep]
    excluded = frozenset(excluded_questions)
    if excluded:
        chosen = [it for it in chosen if question_key(it.question) not in excluded]
    return chosen
