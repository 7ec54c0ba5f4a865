"""`examples: true`: a gate for code. The first parent whose program passes the examples the task itself shows
(a docstring's `>>> f(x)` and its value; `lemon.runtime.examples_gate`) is taken alone; a task without examples
leaves the vote standing. `examples: false` is the rule without the gate (one value for it, so text and model
round-trip)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator

from lemon.spec.stops.base import StopCriterion, StopView

#: The score of a passing program (a failing one: 0); the gate's threshold.
PASSED = 1


class Examples(StopCriterion):
    key = "examples"
    kind = "gate"
    value_type = Annotated[bool | None, AfterValidator(lambda v: True if v else None)]
    phrase = "examples (a passing program)"
    hint = "examples: true"

    def render(self, value: Any) -> str:
        return "examples: true"

    def variants(self, value: Any, limit: int) -> list[Any]:
        return [None]

    async def refusal(self, value: Any, view: StopView, voter: str, parents: Sequence[str]) -> str | None:
        return await view.examples_refusal(voter)

    async def score(self, value: Any, view: StopView, parent: str) -> float | None:
        passed = await view.passes_examples(parent)
        return None if passed is None else PASSED if passed else 0

    def threshold(self, value: Any) -> float:
        return PASSED


CRITERIA = (Examples(),)
