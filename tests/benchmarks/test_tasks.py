"""The benchmark registry: one entry per benchmark, prompts carry the question, gold answers check as right."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.benchmarks.registry import BENCHMARKS, load_split

KINDS = {"mmlu": "choice", "gsm8k": "number", "aqua": "choice", "multiarith": "number", "svamp": "number",
         "humaneval": "code"}


def test_registry_has_the_six_benchmarks() -> None:
    assert {name: task.kind for name, task in BENCHMARKS.items()} == KINDS
    assert all(task.name == name for name, task in BENCHMARKS.items())
    # grading runs model-written code exactly where the answer is code: the harness asks this, never the kind
    assert {name for name, task in BENCHMARKS.items() if task.sandboxed} == {"humaneval"}


@pytest.mark.parametrize("bench", [b for b, k in KINDS.items() if k != "code"])
def test_gold_replies_check_right_and_wrong_ones_wrong(bench: str, data_dir: Path) -> None:
    task = BENCHMARKS[bench]
    for item in load_split(bench, task.default_split, data_dir)[:20]:
        prompt = task.prompt(item)
        assert item.question in prompt
        if task.kind == "choice":
            assert "Answer with the letter" in prompt and all(f") {c}" in prompt for c in item.choices)
            reply, wrong = f"Reasoning...\nThe answer is ({item.answer}).", "The answer is (A)."
            wrong_ok = item.answer == "A"
        else:
            assert "The answer is X." in prompt
            reply, wrong = f"Let me compute.\nThe answer is {item.answer}.", f"The answer is {item.answer}1."
            wrong_ok = False
        prediction = task.extract(reply, item)
        assert prediction is not None and task.check(prediction, item), item.id
        assert task.check(task.extract(wrong, item) or "", item) is wrong_ok


def test_number_gold_with_separators_and_decimals(data_dir: Path) -> None:
    task = BENCHMARKS["gsm8k"]
    item = next(i for i in load_split("gsm8k", "test", data_dir) if int(i.answer) >= 1000)
    big = f"{int(item.answer):,}"
    assert task.check(task.extract(f"So the total is ${big}.00", item) or "", item)


def test_code_task_round_trip(data_dir: Path) -> None:
    task = BENCHMARKS["humaneval"]
    item = load_split("humaneval", "test", data_dir)[0]
    prompt = task.prompt(item)
    assert item.meta["prompt"].rstrip() in prompt and "```python" in prompt
    reply = f"Here you go:\n```python\n{item.meta['prompt']}{item.meta['canonical_solution']}```\nDone."
    code = task.extract(reply, item)
    assert code is not None and f"def {item.meta['entry_point']}(" in code
    assert task.check(code, item)
    assert not task.check(task.extract("```python\n    return None\n```", item) or "", item)
