"""`confidence: c`: stop once the leading answer is the majority with posterior probability >= c under a uniform
Beta prior (Adaptive-Consistency's Beta criterion, Aggarwal et al. EMNLP 2023)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from lemon.spec.stops.base import StopCriterion, answer_counts


def majority_probability(lead: int, runner_up: int) -> float:
    """P(p_lead > p_runner_up) for the two most common answers under a uniform Beta prior (Adaptive-
    Consistency's Beta criterion): P(X > 1/2) for X ~ Beta(lead + 1, runner_up + 1), computed exactly as a
    binomial tail (for integer a, b: P(X <= 1/2) = P(Bin(a + b - 1, 1/2) >= a))."""
    a, b = lead + 1, runner_up + 1
    n = a + b - 1
    tail = sum(math.comb(n, j) for j in range(a, n + 1)) / 2 ** n
    return 1.0 - tail


class Confidence(StopCriterion):
    key = "confidence"
    kind = "criterion"
    value_type = Annotated[float, Field(ge=0.5, le=0.99)]
    phrase = hint = "confidence (a probability)"
    always_dumped = True

    def render(self, value: Any) -> str:
        return f"confidence: {value!r}"

    def problem(self, value: Any, max_parents: int | None) -> str | None:
        if round(value, 2) != value:
            return "confidence has at most two decimals, e.g. 0.95"
        return None

    def fires(self, value: Any, keys: Sequence[str | None]) -> bool:
        counts = answer_counts(keys)
        return bool(counts) and majority_probability(counts[0], counts[1] if len(counts) > 1 else 0) >= value


CRITERIA = (Confidence(),)
