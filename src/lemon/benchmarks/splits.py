"""Named, deterministic benchmark splits; every training pool is disjoint from every evaluation split.

Why this module exists: the projects this one learns from mixed training items into test accuracy and left it
unclear which evaluation set a number was computed on. Here every split has a name, a written definition (a
`SplitDef` in its benchmark's file, recorded with results via `split_definition`) and a documented size, and the
training pools are made disjoint from the evaluation splits *by construction*, both by item id and by question
text.

A split is drawn from a *source*: one upstream file (or folder) as a benchmark's `load_source` reads it, e.g.
`gsm8k/test.jsonl`. Each benchmark's file (`lemon.benchmarks.gsm8k`, ...) defines its splits with the sizes
and definitions, and names its `default_split` (the evaluation split used unless one is named: the paper's set,
or its hold-out rest) and its `train_split`.

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
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from lemon.benchmarks.base import Benchmark, DataDir, Item, SplitDef
from lemon.errors import LemonError

HOLDOUT_SALT = "lemon-holdout-v1"


class HasIdAndQuestion(Protocol):
    """What the split logic needs of an item (`lemon.benchmarks.base.Item` satisfies it)."""

    @property
    def id(self) -> str: ...

    @property
    def question(self) -> str: ...


T = TypeVar("T", bound=HasIdAndQuestion)


def holdout_splits(what: str, holdout: int, full: int) -> Mapping[str, SplitDef]:
    """`test` (the rest), `train` (the seeded hold-out), `all` (reference): for a file with no train split."""
    held = f"seeded hold-out ({HOLDOUT_SALT}, {holdout} items) of {what}"
    return MappingProxyType({
        "test": SplitDef("all", "eval", full - holdout, "rest", holdout,
                         description=f"{what} minus the {held}"),
        "train": SplitDef("all", "train", holdout, "holdout", holdout, description=f"the {held}"),
        "all": SplitDef("all", "reference", full,
                        description=f"all of {what}; overlaps train (for comparison only)"),
    })


def split_names(bench: Benchmark) -> tuple[str, ...]:
    """The split names defined for `bench` (evaluation splits first, the default one first of all)."""
    defs = bench.splits
    order = {"eval": 0, "train": 1, "reference": 2}
    return tuple(sorted(defs, key=lambda n: (order[defs[n].role], n != bench.default_split, n)))


def get_split(bench: Benchmark, split: str) -> SplitDef:
    """The definition of `bench`/`split`, or a one-line LemonError naming the valid splits."""
    try:
        return bench.splits[split]
    except KeyError:
        raise LemonError(f"unknown split {split!r} for {bench.name}; valid: "
                         f"{', '.join(split_names(bench))}") from None


def eval_splits(bench: Benchmark) -> tuple[str, ...]:
    """The splits with role `eval`."""
    return tuple(n for n, d in bench.splits.items() if d.role == "eval")


def split_definition(bench: Benchmark, split: str) -> dict[str, Any]:
    """A JSON-able record of how `bench`/`split` is defined (store it with results to name the split)."""
    d = get_split(bench, split)
    record: dict[str, Any] = {"benchmark": bench.name, "split": split, "source": d.source, "role": d.role,
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


def load_split(bench: Benchmark, split: str, data_dir: DataDir = None) -> list[Item]:
    """The items of the named split of `bench`, in file order (sources read once per call, never cached)."""
    cache: dict[str, list[Item]] = {}

    def source(name: str) -> list[Item]:
        if name not in cache:
            cache[name] = bench.load_source(name, data_dir)
        return cache[name]

    def items_of(name: str) -> list[Item]:
        d = get_split(bench, name)
        excluded: set[str] = set()
        for other in d.disjoint_from:
            excluded.update(question_key(it.question) for it in items_of(other))
        return select_items(bench.name, d, source(d.source), excluded)

    return items_of(split)
