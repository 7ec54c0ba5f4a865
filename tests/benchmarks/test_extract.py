"""Answer extraction: tricky numbers, multiple-choice replies and code replies, plus a property test."""

from __future__ import annotations

import ast
import re
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lemon.benchmarks.registry import get_benchmark
from lemon.extract import (
    extract_choice,
    extract_code,
    extract_number,
    humaneval_program,
    numbers_equal,
    parse_number,
)

# ---- numbers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("The answer is 18.", "18"),
    ("She makes 9 * 2 = $18 every day.", "18"),
    ("Janet sells 16 - 3 - 4 = 9 eggs.\n#### 2,125", "2125"),
    ("The answer is -3.", "-3"),
    ("Final answer: −4.5", "-4.5"),                     # unicode minus keeps its sign
    ("The answer is 3/4.", "0.75"),
    (r"So $\boxed{-\dfrac{3}{4}}$.", "-0.75"),
    (r"\boxed{1{,}000}", "1000"),
    ("The answer is $1,234.50.", "1234.5"),             # separators and decimals kept
    ("The answer is 3 * 6 = 18.", "18"),                # value after the last '=' on the answer line
    ("The answer is 18. Wait, recheck: the answer is 20.", "20"),  # the last explicit answer wins
    ("The answer is 7, not 0.", "7"),
    (r"The answer is \boxed{12} (checked: 4 + 8 = 12).", "12"),
    ("**Answer:** 42 apples", "42"),
    ("The answer is:\n\n**7**", "7"),
    ("It drops to -5 degrees.", "-5"),                  # fallback: last number, sign kept
    ("We compute 16-3", "3"),                           # a minus glued to an operand is not a sign
    ("The value is 0.125 and then 2.50", "2.5"),
    ("Total: 12,345,678 people", "12345678"),
    ("The answer is .5", "0.5"),
    ("The answer is 2/3", "0.6666666666666666"),
    ("I got 0.", "0"),
    ("No numbers here at all.", None),                  # never defaults to "0"
    ("", None),
    ("<think>maybe 3</think>The answer is 4.", "4"),
])
def test_extract_number(text: str, expected: str | None) -> None:
    assert extract_number(text) == expected


@pytest.mark.parametrize(("a", "b", "equal"), [
    ("18", "18.0", True), ("1,000", "1000", True), ("0.3333333", "1/3", True), ("-2.5", "-2.50", True),
    ("1000001", "1000000", False), ("2", "-2", False), (None, "1", False), ("abc", "abc", False),
    ("0.1", "0.1000000001", True),
])
def test_numbers_equal(a: str | None, b: str | None, equal: bool) -> None:
    assert numbers_equal(a, b) is equal


def test_parse_number_wants_exactly_one_number() -> None:
    assert parse_number("$65") == 65 and parse_number("3 and 4") is None and parse_number(None) is None


@given(st.booleans(), st.integers(min_value=0, max_value=10**12), st.text("0123456789", max_size=6))
def test_formatted_number_round_trips(negative: bool, whole: int, decimals: str) -> None:
    """Any number written with thousands separators in 'The answer is X.' extracts to the same number."""
    text_number = ("-" if negative else "") + f"{whole:,}" + (f".{decimals}" if decimals else "")
    got = extract_number(f"Let me add it up. The answer is {text_number}.")
    assert got is not None and Decimal(got) == Decimal(text_number.replace(",", ""))
    assert numbers_equal(got, text_number)


@given(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_float_repr_round_trips(x: float) -> None:
    text = f"{x:,.4f}"
    assert numbers_equal(extract_number(f"The answer is {text}"), text.replace(",", ""))


# ---- multiple choice ------------------------------------------------------------------------------------

MMLU = ("Anabolism", "Catabolism", "Tolerance", "Homeostasis")
AQUA = ("$61", "$65", "$67.40", "$70", "$78.20")


@pytest.mark.parametrize(("text", "choices", "expected"), [
    ("The answer is (D).", MMLU, "D"),
    ("Answer: C", MMLU, "C"),
    ("answer: **B**", MMLU, "B"),
    ("C) Catabolism is wrong... Final answer: D", MMLU, "D"),
    ("I first thought (A), but the correct answer is D.", MMLU, "D"),    # explicit phrase beats mentions
    ("The answer is (B). Hmm, no. The answer is (C).", MMLU, "C"),        # last explicit answer wins
    ("The answer is Homeostasis.", MMLU, "D"),                           # option text after the phrase
    ("Homeostasis", MMLU, "D"),                                          # whole reply is an option
    ("A train leaves at noon, so option B.", MMLU, "B"),                 # prose "A" is not a letter
    ("**C**", MMLU, "C"),
    ("Option B is correct.", MMLU, "B"),
    (r"$\boxed{C}$", MMLU, "C"),
    ("(a) is tempting but the answer is (c)", MMLU, "C"),                # lower case only in brackets
    ("Between (A) and (C), I pick (C)", MMLU, "C"),                      # last marked mention
    ("A.\n", MMLU, "A"),
    ("Final answer: E", MMLU, None),                                     # E is not an MMLU option
    ("Vitamin C is the best source of it.", MMLU, None),                 # a bare capital in prose
    ("The answer is a bit unclear.", MMLU, None),
    ("I am not sure.", MMLU, None),
    ("The answer is $65.", AQUA, "B"),                                   # numeric option by value
    ("The answer is E) $78.20", AQUA, "E"),
    ("<think>(A)</think>\nThe answer is (B).", MMLU, "B"),
])
def test_extract_choice(text: str, choices: tuple[str, ...], expected: str | None) -> None:
    assert extract_choice(text, choices) == expected


# ---- code -----------------------------------------------------------------------------------------------

PROMPT = 'from typing import List\n\n\ndef add(xs: List[int]) -> int:\n    """Sum of xs."""\n'
FULL = "def add(xs):\n    return sum(xs)\n"


FENCED = "```python\n" + FULL + "```"
SUM_LOOP = "def add(xs):\n    t = 0\n    for x in xs:\n        t += x\n    return t\n"


@pytest.mark.parametrize(("text", "expected"), [
    ("Here:\n" + FENCED + "\nDone.", FULL),
    # lstrip("```python") would eat the start of 'python_ok'
    ("```python\npython_ok = 1\n" + FULL + "```", "python_ok = 1\n" + FULL),
    # several blocks: the one defining the entry point
    ("```py\nprint(1)\n```\n```python\nimport math\n\n" + FULL + "```\n```python\nprint(add([1]))\n```",
     "import math\n\n" + FULL),
    # bare code between prose
    ("Sure! Here it is:\n\nimport math\n\n" + SUM_LOOP + "\nThis works because it loops.",
     "import math\n\n" + SUM_LOOP),
    # the instruction's inline fence echoed in prose opens no block (HumanEval/12, a right program graded wrong)
    ("Here it is in a single ```python code block```:\n\n" + FENCED + "\n\nIt returns `sum(xs)`.", FULL),
    ("```python\n" + FULL, FULL),                                           # unclosed fence (truncated reply)
    ("```python\ndef add(xs):\n    return sum(xs)```", FULL),               # closing fence on the code line
    ("    def add(xs):\n        return sum(xs)", FULL),                      # indented whole function
    ("```\n" + FULL + "```", FULL),                                         # untagged fence
    ("<think>```python\ndef add(xs): return 0\n```</think>\n" + FENCED, FULL),
    ("```python\n    return sum(xs)\n```", PROMPT + "    return sum(xs)\n"),  # body only: joined to the prompt
    ("    return sum(xs)", PROMPT + "    return sum(xs)\n"),
    ("t = 0\n    for x in xs:\n        t += x\n    return t",               # first line lost its indent
     PROMPT + "    t = 0\n    for x in xs:\n        t += x\n    return t\n"),
    ("I don't know how to do this.", None),
    ("", None),
])
def test_extract_code(text: str, expected: str | None) -> None:
    got = extract_code(text, "add", PROMPT)
    assert got == expected
    if got is not None:
        ast.parse(humaneval_program(got, PROMPT, "add"))


def test_humaneval_program_keeps_prompt_helpers() -> None:
    prompt = "import math\n\ndef helper(x):\n    return x + 1\n\n\ndef f(x):\n    '''doc'''\n"
    program = humaneval_program("def f(x):\n    return helper(x)\n", prompt, "f")
    assert program.startswith("import math\n\ndef helper(x):") and program.count("def f(") == 1
    assert humaneval_program("    return helper(x)\n", prompt, "f") == prompt + "    return helper(x)\n"


# ---- the datasets' own texts (issue 12: AQuA rationales end in forms the extractor missed) ------------------

_NAMED_LETTER = re.compile(r"(?<![A-Za-z0-9])([A-E])(?![A-Za-z0-9])")


def _names_its_letter(rationale: str, gold: str) -> bool:
    """The rationale ends by naming the gold letter standing alone ("Answer D", "ANS:A", "=D", "ANSWER D 8000"):
    within the last 24 characters of its last line (not "stock B" earlier in a one-line rationale)."""
    last = next((ln for ln in reversed(rationale.splitlines()) if ln.strip()), "")
    return gold in _NAMED_LETTER.findall(last.rstrip()[-24:])


@pytest.mark.parametrize("source", ["dev", "test"])
def test_every_aqua_rationale_that_names_its_letter_scores_right(source: str, data_dir: Path) -> None:
    items = get_benchmark("aqua").load_source(source, data_dir)
    naming = [it for it in items if _names_its_letter(it.meta["rationale"], it.answer)]
    wrong = [(it.id, it.meta["rationale"][-60:]) for it in naming
             if extract_choice(it.meta["rationale"], it.choices) != it.answer]
    assert len(naming) > 200  # measured: 239 of 254 (dev), 242 of 254 (test)
    assert wrong == []
    # and none of the rest is given a WRONG letter (they name no letter: None, or the right one)
    rest = [it for it in items if it not in naming]
    assert all(extract_choice(it.meta["rationale"], it.choices) in (None, it.answer) for it in rest)


@pytest.mark.parametrize("source", ["train", "test"])
def test_every_gsm8k_reference_solution_scores_right(source: str, data_dir: Path) -> None:
    items = get_benchmark("gsm8k").load_source(source, data_dir)
    wrong = [it.id for it in items if not numbers_equal(extract_number(it.meta["solution"]), it.answer)]
    assert len(items) > 1000 and wrong == []


@pytest.mark.parametrize(("text", "expected"), [
    ("so x = 250 m. Answer D", "D"),
    ("amount of spirit=3*3=9 litre\nanswer B", "B"),
    ("4*4*4*4*4 = 4^5.\nANS:A", "A"),
    ("there are 10 ways to do so.\nANS: D", "D"),
    ("= t/25\nAnswer - D", "D"),
    ("504 * 7 * 2 = 7056\nANSWER A", "A"),
    ("Ans - C", "C"),
    ("Ans is A.", "A"),
    ("= 8000\nANSWER D 8000", "D"),
    ("answer.A", "A"),
    ("Option: B", "B"),
    ("The Answer is, B.", "B"),
    ("Thus, C is the correct answer", "C"),
    ("Therefore A is correct", "A"),
    ("D is the answer", "D"),
    ("so V = 150 + 100 = 250=D", "D"),
    ("12-5=7 C", "C"),
    ("Total distance is M + N\nThus A", "A"),
    ("Hence interest is 618. >>B", "B"),
    ("Let's go through each answer choice: (A) can never be true. (B) must be true.", "B"),  # a list, not a pick
])
def test_aqua_rationale_endings(text: str, expected: str) -> None:
    assert extract_choice(text, AQUA) == expected


@pytest.mark.parametrize(("text", "choices", "expected"), [
    ("To answer this, 65 is too small.", AQUA, None),            # bare "answer" then a number picks nothing
    ("That is the answer. A second check agrees.", MMLU, None),  # "answer. A second": prose
    ("Part A is correct only in spring.", MMLU, None),           # "Part A": a letter inside a phrase
    ("It is mostly vitamin C.", MMLU, None),
    ("I'll answer a question with a question.", MMLU, None),
])
def test_new_answer_forms_stay_strict(text: str, choices: tuple[str, ...], expected: str | None) -> None:
    assert extract_choice(text, choices) == expected


# ---- self-correction and separators -------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("The answer is 18.\nWait, she keeps 4, so 16 - 4 = 12 eggs and 12 * 2 = 24.", "24"),
    ("The answer is 18.\n\nHmm, I made a mistake: 9 * 3 = 27, so she makes $27.", "27"),
    ("The answer is 18. Actually, the total is 20.", "20"),
    ("The answer is 18 because she actually sells 9 eggs.", "18"),       # "actually" mid-sentence: no retraction
    ("The answer is 18. Let me recheck: 9 * 2 = 18. Correct.", "18"),
    ("The answer is 7, not 0.", "7"),
])
def test_a_reply_is_scored_on_the_answer_it_ends_with(text: str, expected: str) -> None:
    assert extract_number(text) == expected


def test_a_choice_reply_that_corrects_itself_is_scored_on_its_last_pick() -> None:
    assert extract_choice("The answer is (B). Wait, I misread the units; it is (D).", MMLU) == "D"
    assert extract_choice("The answer is (B). The other options, (A) and (C), are wrong.", MMLU) == "B"


@pytest.mark.parametrize(("text", "expected"), [
    ("The answer is 1 234 567.", "1234567"),
    ("The answer is 1\u2009234.5", "1234.5"),          # thin space
    ("The answer is 1\u202f000", "1000"),              # narrow no-break space
    ("The answer is 1\u00a0000\u00a0000", "1000000"),  # no-break space
    ("The answer is 1_000_000", "1000000"),
    ("The answer is 1'234'567.25", "1234567.25"),     # Swiss apostrophe, with decimals
    ("The answer is 12’500", "12500"),
    ("The answer is 1.234.567.", "1234567"),          # dots as separators: only with two or more groups
    ("The answer is 1.234", "1.234"),                 # one group: a decimal
    ("He ran 2 100-metre races.", "100"),             # a space before a hyphenated word is not a separator
    ("The answer is 1,234 567", "1234"),              # separators are not mixed within a number
])
def test_thousands_separators_beyond_the_comma(text: str, expected: str) -> None:
    assert extract_number(text) == expected
