"""`logprob: t`: a gate. The first parent whose reply has a log-probability >= t nats under its own model (summed
over the reply's tokens) is sure, fires the rule and is taken alone; it may stand alone (then the majority of the
parents run if none was sure) or beside a criterion. Scoring costs no tokens (`lemon.runtime.stop_rules`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BeforeValidator

from lemon.spec.bounds import MAX_LOGPROB, MIN_LOGPROB
from lemon.spec.stops.base import StopCriterion, StopView

#: How far one notch moves a `logprob` gate, in nats.
LOGPROB_STEP = 5
_WHOLE = re.compile(r"[-+]?[0-9]{1,9}")  # short: a 5,000-digit string never reaches int()


def _shown(value: object) -> str:
    """A hostile value in one short line of an error message."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 40 else text[:37] + "..."


def whole_nats(value: object) -> object:
    """A whole number of nats in the bounds (spec text reads every scalar as a string: digits with a sign are
    that number), and nothing else YAML or JSON could turn into one (a boolean, a fraction, infinity): one
    message that says what to write instead."""
    number = int(value) if isinstance(value, str) and _WHOLE.fullmatch(value) else value
    whole = isinstance(number, int) and not isinstance(number, bool)
    if not whole or not MIN_LOGPROB <= number <= MAX_LOGPROB:  # type: ignore[operator]
        raise ValueError(f"logprob must be a whole number of nats from {MIN_LOGPROB} to {MAX_LOGPROB} "
                         f"(a log-probability is negative; e.g. -25), got {_shown(value)}")
    return number


class Logprob(StopCriterion):
    key = "logprob"
    kind = "gate"
    value_type = Annotated[int, BeforeValidator(whole_nats)]
    phrase = "logprob (a sure reply)"
    hint = "logprob (e.g. -25)"

    def variants(self, value: Any, limit: int) -> list[Any]:
        """-/+ 5 nats (clamped to the bounds), or the gate dropped."""
        moved = sorted({min(max(value + d, MIN_LOGPROB), MAX_LOGPROB) for d in (-LOGPROB_STEP, LOGPROB_STEP)})
        return [*(t for t in moved if t != value), None]

    def describe(self, old: Any, new: Any) -> str:
        if old == new:
            return ""
        if new is None:
            return "; no parent is taken alone any more"
        if old is None:
            return f"; a parent whose reply has log-probability >= {new} is taken alone"
        stricter = new > old
        return (f"; the gate is {'stricter' if stricter else 'looser'}: a parent is taken alone at log-probability "
                f">= {new} instead of >= {old}")

    async def refusal(self, value: Any, view: StopView, voter: str, parents: Sequence[str]) -> str | None:
        return view.scoring_refusal(voter, parents)

    async def score(self, value: Any, view: StopView, parent: str) -> float | None:
        return await view.score(parent)

    def threshold(self, value: Any) -> float:
        return value


CRITERIA = (Logprob(),)
