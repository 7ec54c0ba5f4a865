"""Training tasks: items of a benchmark's TRAIN split, with the benchmark's own prompt and checker.

Training draws only from the benchmark's `train_split`, which is disjoint from every evaluation split by
construction; the split name and item ids are recorded in the run directory so that anyone can check it.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from lemon.benchmarks.base import Benchmark, Item, reply_tokens
from lemon.benchmarks.registry import get_benchmark
from lemon.benchmarks.splits import get_split, load_split, split_definition
from lemon.errors import LemonError


@dataclass(frozen=True)
class TrainTask:
    """One training item: the text the orchestrator and workers see, and how to grade an answer."""

    id: str
    prompt: str
    grade: Callable[[str], bool | Awaitable[bool]]  # final answer text -> bool; extraction included
    vote_key: Callable[[str], str | None] | None = None
    kind: str = "number"  # the benchmark's answer kind: number, choice or code
    bank_seed: int = 0  # the workers' seed of `lemon eval`'s seed 0 on this item: the sample bank's draws
    # The worker tokens per reply the benchmark asks for (`reply_tokens`; AQuA and MMLU 1,024), None: the
    # executor's. `workers.worker_tasks` settles it against the training config before any rollout.
    reply_tokens: int | None = None


async def is_correct(task: TrainTask, answer: str) -> bool:
    """Grade `answer`; a checker that blocks (code sandbox) runs off the event loop."""
    if not answer:
        return False
    if inspect.iscoroutinefunction(task.grade):
        return bool(await task.grade(answer))
    return bool(await asyncio.to_thread(task.grade, answer))


def make_task(bench: Benchmark, item: Item) -> TrainTask:
    """Wrap one benchmark item: grade = the benchmark's checker on its extracted answer."""

    def grade(text: str) -> bool:
        pred = bench.extract(text, item)
        return pred is not None and bool(bench.check(pred, item))

    from lemon.evaluation.item import item_seed

    return TrainTask(id=str(item.id), prompt=bench.prompt(item), grade=grade,
                     vote_key=lambda text: bench.extract(text, item), kind=bench.kind,
                     bank_seed=item_seed(bench.name, str(item.id), 0), reply_tokens=reply_tokens(bench))


def load_train_tasks(benchmark: str, *, split: str | None = None, limit: int | None = None, offset: int = 0,
                     data_dir: str | os.PathLike[str] | None = None,
                     allow_eval_split: bool = False) -> tuple[str, list[TrainTask]]:
    """(split name, tasks) from the benchmark's training split (items offset..offset+limit, file order).

    `benchmark` may be a comma-separated mixture (`gsm8k,svamp,multiarith`): see `_mixture`.

    Naming an evaluation split is refused unless `allow_eval_split` (only the held-out validity check of
    SFT output may look at other items, and it never trains on them).
    """
    if "," in benchmark:
        return _mixture(benchmark, split=split, limit=limit, offset=offset, data_dir=data_dir)
    bench = get_benchmark(benchmark)
    name = split or bench.train_split
    role = get_split(bench, name).role
    if role != "train" and not allow_eval_split:
        raise LemonError(f"split {benchmark}/{name} is a {role} split; training uses only the train split "
                         f"{bench.train_split!r}")
    items: Sequence[Item] = load_split(bench, name, data_dir)
    items = items[offset:] if limit is None else items[offset:offset + limit]
    if not items:
        raise LemonError(f"{benchmark}/{name} has no items at offset {offset} (limit {limit})")
    return name, [make_task(bench, it) for it in items]


def _mixture(benchmarks: str, *, split: str | None, limit: int | None, offset: int,
             data_dir: str | os.PathLike[str] | None) -> tuple[str, list[TrainTask]]:
    """Tasks of several benchmarks' TRAIN splits (`limit` items of each from `offset`), interleaved one of each
    in turn, so any prefix of the task list (what a short run sees) mixes them: a policy trained on easy and
    hard benchmarks together must tell them apart to size its team (issue 24)."""
    names = [b.strip() for b in benchmarks.split(",")]
    if len(set(names)) != len(names) or not all(names):
        raise LemonError(f"benchmark mixture {benchmarks!r}: name each benchmark once, e.g. gsm8k,svamp,multiarith")
    if split is not None:
        raise LemonError("a benchmark mixture trains on each benchmark's own train split; do not name a split")
    parts = [load_train_tasks(b, limit=limit, offset=offset, data_dir=data_dir) for b in names]
    mixed = [t for group in itertools.zip_longest(*(ts for _, ts in parts)) for t in group if t is not None]
    return "+".join(name for name, _ in parts), mixed


def split_record(benchmark: str, split: str, tasks: Sequence[TrainTask]) -> dict[str, object]:
    """What run.json records about the data: the split's definition and the exact item ids used (for a mixture,
    one record per benchmark)."""
    if "," in benchmark:
        names, parts = benchmark.split(","), split.split("+")
        return {"benchmark": benchmark, "split": split, "item_ids": [t.id for t in tasks],
                "mixture": [split_record(b.strip(), sp, [t for t in tasks if t.id.startswith(f"{b.strip()}/")])
                            for b, sp in zip(names, parts, strict=True)]}
    return {"benchmark": benchmark, "split": split, "definition": split_definition(get_benchmark(benchmark), split),
            "item_ids": [t.id for t in tasks]}
