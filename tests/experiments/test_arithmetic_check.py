"""experiments/arithmetic_check.py: a reply's stated arithmetic recomputed, and the vote that leaves wrong sums out."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from tests.experiments import load_script

check = load_script("arithmetic_check")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


@given(st.integers(0, 10_000), st.sampled_from(sorted(OPS)), st.integers(0, 10_000), st.integers(1, 500))
def test_a_right_result_passes_and_a_wrong_one_is_caught(a: int, op: str, b: int, off: int) -> None:
    """The invariant: of one statement in a sentence, the right result is never flagged and any other is."""
    right = OPS[op](a, b)
    wrong = right + off + abs(right) // 100  # outside the rounding allowed (half a percent)
    assert check.arithmetic_errors(f"So she has {a} {op} {b} = {right} apples.") == (1, 0)
    assert check.arithmetic_errors(f"So she has {a} {op} {b} = {wrong} apples.") == (1, 1)


def test_how_replies_write_arithmetic_is_read() -> None:
    reply = ("Each box holds \\( 12 \\times 3 = 36 \\) eggs; she sells $1,200 ÷ 4 = $300 a week and 7 x 8 = 56 more. "
             "Half is \\frac{10}{4} = 2.5, a third 10 / 3 = 3.33, and (48 + 24) / 2 = 36. Wrong: 15 - 4 = 12.")
    assert check.arithmetic_errors(reply) == (7, 1)
    assert check.arithmetic_errors("The answer is x = 5 and 2024 = year. Step 3 = done.") == (0, 0)


def test_a_long_reply_is_read_in_linear_time() -> None:
    """A reply of digits and operators with no result (what made a backtracking pattern hang) is read at once."""
    assert check.arithmetic_errors("1 + " * 20_000 + "=") == (0, 0)


def test_the_checked_vote_leaves_out_replies_with_a_wrong_result() -> None:
    def last_number(text: str) -> str | None:
        numbers = re.findall(r"-?\d+", text)
        return numbers[-1] if numbers else None

    replies = ["3 * 4 = 13, so 13", "6 + 7 = 13, so 13", "3 * 4 = 12, so 12"]
    assert check.majority_vote(replies, last_number) == replies[0]  # two say 13
    assert check.checked_vote(replies, last_number) == replies[1]   # 3 * 4 = 13 is left out: 13 against 12, tie
    assert check.checked_vote(["2 + 2 = 5, so 5", "1 + 1 = 3, so 3"], last_number) == "2 + 2 = 5, so 5"
