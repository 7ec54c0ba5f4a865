"""What a stop criterion is: one object that owns a key of a voter's `stop:` rule, from the text to the run.

A rule holds at most one criterion of each `kind`: a `criterion` decides from the parents run so far whether the
vote may stop (`agree`, `confidence` from their answers; `posterior` also weighs each answer by its reply's
log-probability), a `gate` may take one parent alone (`logprob`, `examples`), a `controller` decides alone which
parent runs next, if any (`learned`). Beside them the rule's modifiers (`max`, `wave`) say how many parents run,
and when; they belong to every rule (`lemon.spec.model.StopRule`).

A criterion owns its value's validation (`value_type`, and `problem` for what depends on the rest of the rule),
its text (`render`: its part of the canonical one-line rule, hence its span), what it needs of the parents
(`least_parents`), its counterfactual edits (`variants`, `describe`) and its runtime decision: `decides` for a
criterion (by default `fires` on the vote keys), `refusal` / `score` / `threshold` for a gate, asked through a
`StopView` the runtime provides (the parents' vote keys, a reply's log-probability, a program's verdict on the
task's examples), so the criterion needs nothing above the spec layer. The runtime records each decision as the
rule's `stop` trace event (the rule as rendered, and for a gate each parent's score and the sure one).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import cached_property
from typing import Any, Literal, Protocol

from pydantic import TypeAdapter

from lemon.spec.stops.policy import Reply

Kind = Literal["criterion", "gate", "controller"]


class StopView(Protocol):
    """What a run tells a criterion about a voter's parents (`lemon.runtime.executor` implements it)."""

    def keys(self, parents: Sequence[str]) -> list[str | None]:
        """The vote keys (extracted answers) of parents that ran, in order."""
        ...

    def scoring_refusal(self, voter: str, parents: Sequence[str], what: str = "logprob gate") -> str | None:
        """Why the parents' replies cannot be scored on this pool (one line naming the fix, which drops `what`'s
        first word, the rule's key), or None."""
        ...

    async def score(self, parent: str) -> float | None:
        """The summed token log-probability of a parent's reply under its model (None: it calls no model)."""
        ...

    async def examples_refusal(self, voter: str) -> str | None:
        """Why the task's examples cannot be run here (one line naming the fix), or None (also when none)."""
        ...

    async def passes_examples(self, parent: str) -> bool | None:
        """Whether a parent's program passes the examples the task shows (None: the task shows none)."""
        ...

    def is_program(self, parent: str) -> bool:
        """Whether a parent is a program voter (its answer is computed by running its code)."""
        ...

    def reply(self, parent: str) -> Reply:
        """A parent that ran, as a controller sees it (answer, log-probability, length, cut at the limit)."""
        ...

    def task_chars(self) -> int:
        """The task's length in characters."""
        ...


def answer_counts(keys: Sequence[str | None]) -> list[int]:
    """How many parents gave each answer, most common first (no answer counts for none)."""
    return sorted(Counter(k for k in keys if k).values(), reverse=True)


class StopCriterion:
    """The defaults a criterion overrides; see the module docstring. `phrase` names it in a message listing
    the alternatives ("agree (a count)"), `hint` shows how to write one ("logprob (e.g. -25)").
    `always_dumped`: the rule's dump (traces' topology) holds the key even when unset, as the first rules did."""

    key: str
    kind: Kind
    value_type: Any
    phrase: str
    hint: str
    always_dumped: bool = False

    @cached_property
    def adapter(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.value_type)

    def render(self, value: Any) -> str:
        return f"{self.key}: {value}"

    def least_parents(self, value: Any) -> int | None:
        """Parents that must have answered before the criterion can fire (None: no bound of its own)."""
        return None

    def problem(self, value: Any, max_parents: int | None) -> str | None:
        """What is wrong with the value given the rule's `max` (None: nothing)."""
        return None

    def variants(self, value: Any, limit: int) -> list[Any]:
        """Values one notch away, for a counterfactual edit (None drops the criterion); `limit` is the parents
        the rule may run. Only those that validate are offered (`spec.edits.stop`)."""
        return []

    def describe(self, old: Any, new: Any) -> str:
        """What a change of the value does, in words ("" when nothing worth saying)."""
        return ""

    def fires(self, value: Any, keys: Sequence[str | None]) -> bool:
        """A criterion's decision on the vote keys of the parents run so far."""
        return False

    async def decides(self, value: Any, view: StopView, parents: Sequence[str]) -> bool:
        """A criterion's decision on the parents run so far, as the runtime asks it: `fires` on their vote keys,
        unless the criterion reads more of them (`posterior` weighs each reply by its log-probability)."""
        return self.fires(value, view.keys(parents))

    async def refusal(self, value: Any, view: StopView, voter: str, parents: Sequence[str]) -> str | None:
        """A gate's or a criterion's check before any parent runs: why it cannot run here (one line), or None."""
        return None

    async def score(self, value: Any, view: StopView, parent: str) -> float | None:
        """A gate's score of one parent that ran (None: not scored)."""
        return None

    def threshold(self, value: Any) -> float:
        """The score at which a gate takes a parent alone."""
        raise NotImplementedError(self.key)

    def first_parent(self, value: Any, view: StopView, order: Sequence[str]) -> tuple[str, dict[str, object] | None]:
        """A controller's opening parent, chosen before any reply exists, and the decision as the trace records it
        (None: nothing was decided, the first written parent runs)."""
        return order[0], None

    async def next_parent(self, value: Any, view: StopView, voter: str, ran: Sequence[str],
                          order: Sequence[str]) -> tuple[str | None, dict[str, object]]:
        """A controller's choice after the parents in `ran` returned: the next of `order` to run (None: stop),
        and the decision as the trace records it."""
        raise NotImplementedError(self.key)
