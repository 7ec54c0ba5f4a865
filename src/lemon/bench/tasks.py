"""The one table of benchmarks: for each, its answer kind, task prompt, extractor and checker.

Why one table: the projects this one learns from kept a copy of the run script per dataset, and the copies
drifted. Here a benchmark is a row; the logic lives once per answer kind (`number`, `choice`, `code`) and
every method (baseline or orchestrator) gets the same prompt, extraction and check for a given item.
Splits and loaders live in `splits.py` and `datasets.py`, keyed by the same names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from lemon.bench.datasets import Item
from lemon.bench.extract import extract_choice, extract_code, extract_number, numbers_equal
from lemon.bench.sandbox import check_humaneval
from lemon.errors import LemonError

Kind = Literal["number", "choice", "code"]
LETTERS = "ABCDE"

NUMBER_INSTRUCTION = ("Solve the problem. End your reply with a final line of the form \"The answer is X.\", "
                      "where X is a single number (digits only, no units).")
CODE_INSTRUCTION = ("Complete the Python function below. Reply with the complete function (its signature "
                    "and body, with any imports it needs) in a single ```python code block.")


@dataclass(frozen=True)
class BenchmarkTask:
    """How a benchmark's items are posed to agents, how answers are read back, and how they are scored."""

    name: str
    kind: Kind
    format_prompt: Callable[[Item], str]
    extract: Callable[[str, Item], str | None]
    check: Callable[[str, Item], bool]


# ---- number ---------------------------------------------------------------------------------------------


def number_prompt(item: Item) -> str:
    """The question, then the instruction to end with 'The answer is X.'."""
    return f"{item.question}\n\n{NUMBER_INSTRUCTION}"


def number_extract(text: str, item: Item) -> str | None:
    """The final number in the reply (see `extract_number`)."""
    return extract_number(text)


def number_check(prediction: str, item: Item) -> bool:
    """Tolerant numeric equality with the gold number."""
    return numbers_equal(prediction, item.answer)


# ---- choice ---------------------------------------------------------------------------------------------


def choice_prompt(item: Item) -> str:
    """The question, the lettered options, and the instruction to answer with the letter."""
    letters = LETTERS[: len(item.choices)]
    options = "\n".join(f"({letter}) {text}" for letter, text in zip(letters, item.choices, strict=False))
    return (f"{item.question}\n\n{options}\n\nAnswer with the letter of the correct option. End your reply "
            f"with a final line of the form \"The answer is (X).\", where X is one of {', '.join(letters)}.")


def choice_extract(text: str, item: Item) -> str | None:
    """The chosen option letter (see `extract_choice`)."""
    return extract_choice(text, item.choices)


def choice_check(prediction: str, item: Item) -> bool:
    """Letter equality with the gold letter."""
    return prediction.strip().upper() == item.answer.strip().upper()


# ---- code -----------------------------------------------------------------------------------------------


def code_prompt(item: Item) -> str:
    """The HumanEval prompt (signature and docstring) with the instruction to return the whole function."""
    return f"{CODE_INSTRUCTION}\n\n```python\n{item.meta['prompt'].rstrip()}\n```"


def code_extract(text: str, item: Item) -> str | None:
    """The function code in the reply, a body joined to the prompt (see `extract_code`)."""
    return extract_code(text, item.meta["entry_point"], item.meta["prompt"])


def code_check(prediction: str, item: Item) -> bool:
    """Whether the code passes the item's tests in the sandbox."""
    return check_humaneval(prediction, item)


_KindFns = tuple[Callable[[Item], str], Callable[[str, Item], str | None], Callable[[str, Item], bool]]
_KINDS: Mapping[str, _KindFns] = MappingProxyType({
    "number": (number_prompt, number_extract, number_check),
    "choice": (choice_prompt, choice_extract, choice_check),
    "code": (code_prompt, code_extract, code_check),
})


def _task(name: str, kind: Kind) -> BenchmarkTask:
    prompt, extract, check = _KINDS[kind]
    return BenchmarkTask(name=name, kind=kind, format_prompt=prompt, extract=extract, check=check)


BENCHMARKS: Mapping[str, BenchmarkTask] = MappingProxyType({
    "mmlu": _task("mmlu", "choice"),
    "gsm8k": _task("gsm8k", "number"),
    "aqua": _task("aqua", "choice"),
    "multiarith": _task("multiarith", "number"),
    "svamp": _task("svamp", "number"),
    "humaneval": _task("humaneval", "code"),
})


def get_task(benchmark: str) -> BenchmarkTask:
    """The `BenchmarkTask` of `benchmark`, or a one-line LemonError listing the valid names."""
    try:
        return BENCHMARKS[benchmark]
    except KeyError:
        raise LemonError(f"unknown benchmark {benchmark!r}; valid: {', '.join(sorted(BENCHMARKS))}") from None
