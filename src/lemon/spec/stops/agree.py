"""`agree: k`: stop once k parents gave the same answer (Early-Stopping Self-Consistency's window rule)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from lemon.spec.bounds import MAX_AGENTS
from lemon.spec.stops.base import StopCriterion, answer_counts


class Agree(StopCriterion):
    key = "agree"
    kind = "criterion"
    value_type = Annotated[int, Field(ge=2, le=MAX_AGENTS - 1)]
    phrase = hint = "agree (a count)"
    always_dumped = True

    def least_parents(self, value: Any) -> int | None:
        return int(value)

    def problem(self, value: Any, max_parents: int | None) -> str | None:
        if max_parents is not None and value > max_parents:
            return f"agree ({value}) cannot exceed max ({max_parents})"
        return None

    def variants(self, value: Any, limit: int) -> list[Any]:
        """k - 1 and k + 1, from 2 to the parents the rule may run."""
        return [k for k in (value - 1, value + 1) if 2 <= k <= limit]

    def fires(self, value: Any, keys: Sequence[str | None]) -> bool:
        counts = answer_counts(keys)
        return bool(counts) and counts[0] >= value


CRITERIA = (Agree(),)
