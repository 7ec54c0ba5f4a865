"""The answer kinds benchmarks share: how a number or a lettered choice is asked for, read back and graded.

Why here, once: the projects this one learns from kept a copy of the run script per dataset, and the copies
drifted. Every benchmark whose answer is a number (GSM8K, SVAMP, MultiArith) uses `NUMBER`, every multiple-
choice one (MMLU, AQuA) uses `CHOICE`, so every method (baseline or orchestrator) gets the same prompt,
extraction and check for a given item. Code answers are HumanEval's own format (`lemon.benchmarks.humaneval`).
The extractors themselves are the pure functions of `lemon.extract`.
"""

from __future__ import annotations

from lemon.benchmarks.base import AnswerKind, Item
from lemon.extract import extract_choice, extract_number, numbers_equal
from lemon.orchestrator.kinds import letters_equal

LETTERS = "ABCDE"

NUMBER_INSTRUCTION = ("Solve the problem. End your reply with a final line of the form \"The answer is X.\", "
                      "where X is a single number (digits only, no units).")


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
    """Letter equality with the gold letter ."""
    return letters_equal(prediction, item.answer)


NUMBER = AnswerKind("number", number_prompt, number_extract, number_check)
CHOICE = AnswerKind("choice", choice_prompt, choice_extract, choice_check)
