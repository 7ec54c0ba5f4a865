"""Loaders: counts on the real data, parsed fields, and one-line DataErrors for missing/malformed files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from lemon.benchmarks.base import DataBenchmark, DataDir, Item
from lemon.benchmarks.files import number_text
from lemon.benchmarks.registry import BENCHMARKS, get_benchmark, load_split
from lemon.errors import DataError, LemonError

SOURCES = {name: bench.sources for name, bench in BENCHMARKS.items() if isinstance(bench, DataBenchmark)}


def load_source(benchmark: str, source: str, data_dir: DataDir = None) -> list[Item]:
    return get_benchmark(benchmark).load_source(source, data_dir)

COUNTS = [
    ("gsm8k", "test", 1319), ("gsm8k", "train", 7473), ("svamp", "all", 1000), ("aqua", "test", 254),
    ("aqua", "dev", 254), ("multiarith", "all", 600), ("mmlu", "val", 1531), ("mmlu", "dev", 285),
    ("mmlu", "test", 14042), ("humaneval", "all", 164),
]


@pytest.mark.parametrize(("bench", "source", "n"), COUNTS)
def test_source_counts_and_unique_ids(bench: str, source: str, n: int, data_dir: Path) -> None:
    items = load_source(bench, source, data_dir)
    assert len(items) == n
    assert len({it.id for it in items}) == n
    assert all(it.question.strip() and it.answer.strip() for it in items)


def test_mmlu_order_interleaves_subjects(data_dir: Path) -> None:
    """Upstream is one file per subject; the first 57 items take one question of every subject, and within a
    subject the rows keep their upstream order (the id's row number rises)."""
    val = load_source("mmlu", "val", data_dir)
    assert len({it.meta["subject"] for it in val[:57]}) == 57
    assert val[0].id == "mmlu/val/abstract_algebra/0" and val[57].id == "mmlu/val/abstract_algebra/1"
    rows: dict[str, list[int]] = {}
    for it in val:
        rows.setdefault(it.meta["subject"], []).append(int(it.id.rsplit("/", 1)[1]))
    assert all(r == list(range(len(r))) for r in rows.values())


def test_item_fields_per_format(data_dir: Path) -> None:
    g = load_source("gsm8k", "test", data_dir)
    assert g[0].id == "gsm8k/test/0" and g[0].answer == "18" and g[0].question.startswith("Janet")
    # thousands separators removed from gold answers; every gold answer is an integer
    assert all("," not in it.answer and int(it.answer) == float(it.answer) for it in g)
    with_separators = [it for it in g if "," in it.meta["solution"].splitlines()[-1]]
    assert len(with_separators) == 14  # as the data README counts them
    s = load_source("svamp", "all", data_dir)
    assert s[0].id == "svamp/chal-1" and s[0].answer == "51"
    assert s[0].question == ("Each pack of dvds costs 76 dollars. If there is a discount of 25 dollars on "
                             "each pack How much do you have to pay to buy each pack?")
    a = load_source("aqua", "test", data_dir)
    assert a[0].answer == "A" and len(a[0].choices) == 5 and a[0].choices[0] == "5(√3 + 1)"
    assert a[1].choices == ("$61", "$65", "$67.40", "$70", "$78.20") and a[1].answer == "E"
    m = load_source("multiarith", "all", data_dir)
    assert m[0].id == "multiarith/0" and m[0].answer == "39" and not m[0].question.startswith(" ")
    mm = load_source("mmlu", "val", data_dir)
    anatomy = [it for it in mm if it.meta["subject"] == "anatomy"]
    assert len(anatomy) == 14 and anatomy[0].id == "mmlu/val/anatomy/0"
    assert anatomy[0].choices == ("Anabolism", "Catabolism", "Tolerance", "Homeostasis")
    assert anatomy[0].answer == "D"
    # a quoted field with commas
    assert anatomy[1].choices[2] == "The maxillary artery, retromandibular vein and facial artery"
    h = load_source("humaneval", "all", data_dir)
    assert h[3].id == "HumanEval/3" and h[3].meta["entry_point"] == "below_zero"
    assert "def check(candidate)" in h[3].answer and h[3].question == h[3].meta["prompt"]


def test_ids_are_stable_across_calls(data_dir: Path) -> None:
    first = [it.id for it in load_split("multiarith", "test", data_dir)]
    assert first == [it.id for it in load_split("multiarith", "test", data_dir)]


def test_items_are_hashable_and_frozen() -> None:
    item = Item("x/1", "q", "1", meta={"a": 1})
    assert hash(item) == hash(Item("x/1", "q", "1"))
    with pytest.raises(AttributeError):
        item.answer = "2"  # type: ignore[misc]


@pytest.mark.parametrize(("value", "text"), [(51.0, "51"), (2.5, "2.5"), ("2,125", "2125"), (-3.0, "-3"),
                                             (7, "7")])
def test_number_text(value: float | str, text: str) -> None:
    assert number_text(value) == text


def test_data_dir_from_environment(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEMON_DATA_DIR", str(data_dir))
    assert len(load_split("aqua", "test")) == 254


@pytest.mark.parametrize(("bench", "source"), [(b, s) for b in SOURCES for s in SOURCES[b]])
def test_missing_file_is_one_line_data_error(bench: str, source: str, tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        load_source(bench, source, tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and str(tmp_path) in msg
    assert "missing" in msg and "expected" in msg and "LEMON_DATA_DIR" in msg


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(("rel", "content", "bench", "source", "needle"), [
    ("gsm8k/test.jsonl", '{"question": "q", "answer": "no final line"}\n', "gsm8k", "test", "####"),
    ("gsm8k/test.jsonl", '{"question": "q", "answer": "#### 1"}\nnot json\n', "gsm8k", "test", "line 2"),
    ("svamp/SVAMP.json", '{"ID": "chal-1"}', "svamp", "all", "JSON array"),
    ("svamp/SVAMP.json", '[{"ID": "chal-1", "Body": "b", "Question": "q"}]', "svamp", "all", "Answer"),
    ("aqua/test.json", '{"question": "q", "options": ["125"], "correct": "A"}\n', "aqua", "test", "option 0"),
    ("multiarith/MultiArith.json", "[1, 2]", "multiarith", "all", "JSON array"),
    ("mmlu/val/anatomy_val.csv", "q,a,b,c\n", "mmlu", "val", "row 1"),
    ("mmlu/val/anatomy_val.csv", "q,a,b,c,d,F\n", "mmlu", "val", "row 1"),
])
def test_malformed_file_is_one_line_data_error(rel: str, content: str, bench: str, source: str, needle: str,
                                               tmp_path: Path) -> None:
    _write(tmp_path / rel, content)
    with pytest.raises(DataError) as info:
        load_source(bench, source, tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and str(tmp_path / rel) in msg and needle in msg and "expected" in msg


def test_corrupt_gzip_is_data_error(tmp_path: Path) -> None:
    _write(tmp_path / "humaneval" / "HumanEval.jsonl.gz", "not gzip")
    with pytest.raises(DataError, match="unreadable"):
        load_source("humaneval", "all", tmp_path)
    path = tmp_path / "humaneval" / "HumanEval.jsonl.gz"
    path.write_bytes(gzip.compress(json.dumps({"task_id": "HumanEval/0"}).encode()))
    with pytest.raises(DataError, match="prompt"):
        load_source("humaneval", "all", tmp_path)


def test_small_custom_files_load(tmp_path: Path) -> None:
    _write(tmp_path / "aqua" / "test.json",
           '{"question": "2+2?", "options": ["A)3", "B)4", "C)5", "D)6", "E)7"], "correct": "B"}\n')
    (item,) = load_split("aqua", "test", tmp_path)
    assert item == Item("aqua/test/0", "2+2?", "B", ("3", "4", "5", "6", "7"))


def test_every_benchmark_reads_from_files() -> None:
    assert set(SOURCES) == set(BENCHMARKS)


def test_unknown_names_are_one_line_errors(data_dir: Path) -> None:
    with pytest.raises(LemonError, match=r"unknown source gsm8k/dev; valid: gsm8k/test, gsm8k/train"):
        load_source("gsm8k", "dev", data_dir)
    with pytest.raises(LemonError, match=r"unknown split 'nope' for gsm8k; valid: test, train"):
        load_split("gsm8k", "nope", data_dir)
    with pytest.raises(LemonError, match="unknown benchmark 'gsm9k'"):
        load_split("gsm9k", "test", data_dir)
