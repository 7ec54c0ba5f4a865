"""A benchmark is one file: a toy written from scratch (its loader, splits, prompt, extractor and grader) in a
package of its own runs end to end through the real harness, and every benchmark file of LEMON is registered.

The toy lives outside `lemon.benchmarks`, as a third party's would, and is named by reference (`module:OBJECT`);
inside LEMON the same file would sit beside `gsm8k.py` with one line in `registry.BENCHMARKS`."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from lemon.benchmarks.registry import BENCHMARKS, get_benchmark, load_split
from lemon.errors import LemonError
from lemon.evaluation.store import ResultsStore
from lemon.llm.base import ChatRequest
from lemon.llm.scripted import ScriptedBackend
from tests.evalcall import evaluate_kw
from tests.evaluation.conftest import eval_pool, oracle_responder

TOY_FILE = '''
"""Toy: add two small numbers; the reply must end with 'Sum: N'."""

import re
from pathlib import Path

from lemon.benchmarks.base import AnswerKind, DataBenchmark, Item, Source
from lemon.benchmarks.files import json_lines, row_field
from lemon.benchmarks.splits import holdout_splits

_SUM = re.compile(r"Sum:\\s*(-?\\d+)")


def _parse(path: Path, fmt: str) -> list[Item]:
    return [Item(f"toy/{i}", row_field(row, "q", str, path, f"line {i + 1}", fmt),
                 str(row_field(row, "a", int, path, f"line {i + 1}", fmt)))
            for i, row in enumerate(json_lines(path, fmt))]


def _prompt(item: Item) -> str:
    return f"{item.question}\\nEnd with a line 'Sum: N'."


def _extract(text: str, item: Item) -> str | None:
    found = _SUM.findall(text)
    return found[-1] if found else None


def _check(prediction: str, item: Item) -> bool:
    return prediction == item.answer


TOY = DataBenchmark(
    name="toy",
    answers=AnswerKind("number", _prompt, _extract, _check),
    sources={"all": Source("toy/toy.jsonl", 'JSON Lines of {"q", "a"}', _parse)},
    splits=holdout_splits("toy.jsonl", 2, 8),
    default_split="test",
    train_split="train",
)
'''

QUESTIONS = [(f"What is {a} + {b}?", a + b) for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (9, 1), (2, 2), (4, 4),
                                                            (6, 6)]]


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """(reference, data dir) of the toy: one new file in a package of its own, and its data file."""
    package = tmp_path / "code" / "toy_bench_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "toy.py").write_text(TOY_FILE)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    data = tmp_path / "data"
    (data / "toy").mkdir(parents=True)
    (data / "toy" / "toy.jsonl").write_text("".join(json.dumps({"q": q, "a": a}) + "\n" for q, a in QUESTIONS))
    return "toy_bench_pkg.toy:TOY", data


def _replies(answers: dict[str, int], wrong: str, seen: list[str]) -> ScriptedBackend:
    """Workers that answer in the toy's own format (the right sum, except for the question `wrong`), keeping
    every request's text in `seen`."""
    oracle = oracle_responder({q: str(a + 1 if q == wrong else a) for q, a in answers.items()})

    def reply(request: ChatRequest) -> str:
        seen.append("\n".join(m.content for m in request.messages))
        return oracle(request).replace("The answer is", "Sum:")

    return ScriptedBackend("toy-oracle", responder=reply)


async def test_a_toy_benchmark_file_runs_end_to_end_through_the_harness(toy: tuple[str, Path],
                                                                          tmp_path: Path) -> None:
    ref, data = toy
    bench = get_benchmark(ref)
    items = load_split(ref, "test", data)
    assert len(items) == 6 and len(load_split(ref, "train", data)) == 2  # its own splits, seeded hold-out
    assert bench.prompt(items[0]).endswith("End with a line 'Sum: N'.")
    wrong = items[1].question
    seen: list[str] = []
    backend = _replies(dict(QUESTIONS), wrong, seen)
    summary = await evaluate_kw(ref, "vanilla", seeds=2, store=tmp_path / "r.sqlite", data_dir=data,
                                pool="scripted-toy", level="small", pool_factory=lambda: eval_pool(backend))
    assert summary.computed == 12 and summary.split == "test"
    assert summary.stats.accuracy_mean == pytest.approx(5 / 6)  # its grader decides: one question answered wrong
    with ResultsStore(tmp_path / "r.sqlite") as db:
        run = db.run(summary.run_id)
        rows = db.items(summary.run_id)
    assert run is not None and run.benchmark == ref and run.config["kind"] == "number"
    by_item = {(r.item_id, r.seed): r for r in rows}
    assert {r.item_id for r in rows} == {i.id for i in items}
    for item in items:
        for seed in range(2):
            row = by_item[(item.id, seed)]
            gold = dict(QUESTIONS)[item.question]
            # the toy's extractor read "Sum: N" (a number extractor would read the same, so check the wrong one)
            assert row.prediction == str(gold + 1 if item.question == wrong else gold)
            assert row.correct is (item.question != wrong) and row.gold == str(gold)
    # the prompt the workers got is the toy's own, byte for byte
    assert any(bench.prompt(items[0]) in text for text in seen)


def test_a_bad_reference_is_a_one_line_error(toy: tuple[str, Path]) -> None:
    with pytest.raises(LemonError, match=r"cannot import 'no_such_pkg\.toy'") as info:
        get_benchmark("no_such_pkg.toy:TOY")
    assert "\n" not in str(info.value)
    with pytest.raises(LemonError, match="has no benchmark object 'NOPE'"):
        get_benchmark("toy_bench_pkg.toy:NOPE")
    with pytest.raises(LemonError, match=r"lacks .*load_source"):
        get_benchmark("toy_bench_pkg.toy:_SUM")
    with pytest.raises(LemonError, match="unknown benchmark 'toy'"):
        get_benchmark("toy")


def _defined_benchmarks() -> dict[str, str]:
    """module -> the name of the module-level benchmark it defines, for every file of lemon.benchmarks."""
    import lemon.benchmarks

    found = {}
    for path in sorted(Path(lemon.benchmarks.__file__).parent.glob("*.py")):
        for node in ast.parse(path.read_text("utf-8")).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", None) == "DataBenchmark"):
                found[path.stem] = node.targets[0].id  # type: ignore[attr-defined]
    return found


def test_every_benchmark_file_is_registered_once_under_its_own_name() -> None:
    defined = _defined_benchmarks()
    assert set(defined) == {"mmlu", "gsm8k", "aqua", "multiarith", "svamp", "humaneval"}
    assert set(BENCHMARKS) == set(defined)
    for module, constant in defined.items():
        obj = getattr(__import__(f"lemon.benchmarks.{module}", fromlist=[constant]), constant)
        assert BENCHMARKS[module] is obj and obj.name == module


def test_reply_tokens_is_optional_and_checked() -> None:
    """A benchmark written elsewhere without `reply_tokens` keeps the caller's default; a bad value is a one-line
    error naming the benchmark, not a worker call with a nonsense limit."""
    from dataclasses import replace
    from types import SimpleNamespace

    from lemon.benchmarks.base import reply_tokens

    assert reply_tokens(SimpleNamespace(name="bare")) is None  # type: ignore[arg-type]
    assert reply_tokens(get_benchmark("aqua")) == reply_tokens(get_benchmark("mmlu")) == 1024
    assert reply_tokens(get_benchmark("gsm8k")) is None
    for bad in (0, -5, 2.5, True, "1024"):
        with pytest.raises(LemonError, match=r"benchmark aqua: reply_tokens must be a positive integer"):
            reply_tokens(replace(get_benchmark("aqua"), reply_tokens=bad))  # type: ignore[arg-type]
