"""Splits: documented sizes, train/test disjoint by id and question text, deterministic hold-outs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lemon.benchmarks import splits
from lemon.benchmarks.base import Item
from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.benchmarks.splits import eval_splits, holdout_ids, question_key, split_definition, split_names
from lemon.errors import LemonError

BENCHMARKS = ("mmlu", "gsm8k", "aqua", "multiarith", "svamp", "humaneval")


def train_split(name: str) -> str:
    return get_benchmark(name).train_split


def test_defaults_and_training_pools() -> None:
    assert {b: get_benchmark(b).default_split for b in BENCHMARKS} == {
        "mmlu": "val", "gsm8k": "test", "aqua": "test", "multiarith": "test", "svamp": "test", "humaneval": "test"}
    assert {b: train_split(b) for b in BENCHMARKS} == {
        "mmlu": "dev", "gsm8k": "train", "aqua": "dev", "multiarith": "train", "svamp": "train",
        "humaneval": "train"}
    for b in BENCHMARKS:
        bench = get_benchmark(b)
        names = split_names(bench)
        assert names[0] == bench.default_split and bench.train_split in names
        assert bench.splits[bench.default_split].role == "eval" and bench.splits[bench.train_split].role == "train"


@pytest.mark.parametrize(("bench", "split", "n"), [
    ("gsm8k", "test", 1319), ("gsm8k", "train", 7473), ("svamp", "test", 800), ("svamp", "train", 200),
    ("svamp", "all", 1000), ("aqua", "test", 254), ("aqua", "dev", 254), ("multiarith", "test", 500),
    ("multiarith", "train", 100), ("multiarith", "all", 600), ("mmlu", "val", 1531), ("mmlu", "test", 14042),
    ("mmlu", "dev", 279), ("humaneval", "test", 124), ("humaneval", "train", 40), ("humaneval", "all", 164),
])
def test_split_sizes_are_as_documented(bench: str, split: str, n: int, data_dir: Path) -> None:
    assert get_benchmark(bench).splits[split].size == n
    assert len(load_split(bench, split, data_dir)) == n


@pytest.mark.parametrize("bench", BENCHMARKS)
def test_train_is_disjoint_from_every_eval_split(bench: str, data_dir: Path) -> None:
    train = load_split(bench, train_split(bench), data_dir)
    assert train
    for name in eval_splits(get_benchmark(bench)):
        test = load_split(bench, name, data_dir)
        assert not {it.id for it in train} & {it.id for it in test}, name
        train_texts = {question_key(it.question) for it in train}
        assert not train_texts & {question_key(it.question) for it in test}, name


@pytest.mark.parametrize("bench", ["multiarith", "svamp", "humaneval"])
def test_holdout_partitions_the_file(bench: str, data_dir: Path) -> None:
    full = load_split(bench, "all", data_dir)
    test = load_split(bench, "test", data_dir)
    train = load_split(bench, "train", data_dir)
    assert sorted(it.id for it in test + train) == sorted(it.id for it in full)
    # file order is kept in each part
    order = {it.id: i for i, it in enumerate(full)}
    assert [order[it.id] for it in test] == sorted(order[it.id] for it in test)


def test_holdout_is_independent_of_python_hash_seed(data_dir: Path) -> None:
    code = ("from lemon.benchmarks.registry import load_split; import sys; "
            f"print(','.join(i.id for i in load_split('multiarith', 'train', {str(data_dir)!r})))")
    src = str(Path(__file__).resolve().parents[2] / "src")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PYTHONPATH": src, "PATH": "/usr/bin:/bin"}).stdout
            for seed in ("1", "2")}
    assert len(outs) == 1
    assert next(iter(outs)).strip() == ",".join(i.id for i in load_split("multiarith", "train", data_dir))


def test_holdout_keeps_duplicate_questions_together() -> None:
    items = [Item(f"t/{i}", q, "1") for i, q in enumerate(["a", "b", "A ", "c", "d", "b", "e", "f"])]
    for size in range(0, 7):
        held = holdout_ids("t", items, size)
        assert len(held) == size
        groups = {question_key(it.question) for it in items if it.id in held}
        assert all((it.id in held) == (question_key(it.question) in groups) for it in items)
    assert holdout_ids("t", items, 3) == holdout_ids("t", list(reversed(items)), 3)
    with pytest.raises(LemonError, match="cannot hold out"):
        holdout_ids("t", items, 9)


def test_split_definition_names_the_split() -> None:
    rec = split_definition(get_benchmark("multiarith"), "test")
    assert rec["source"] == "all" and rec["select"] == "rest" and rec["holdout"] == 100
    assert rec["salt"] == splits.HOLDOUT_SALT and rec["size"] == 500
    assert split_definition(get_benchmark("mmlu"), "dev")["disjoint_from"] == ["val", "test"]


def test_unknown_split_lists_the_valid_ones() -> None:
    with pytest.raises(LemonError, match="valid: test, train, all"):
        splits.get_split(get_benchmark("svamp"), "nope")
