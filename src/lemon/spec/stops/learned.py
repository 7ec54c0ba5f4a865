"""`learned: NAME`: a controller. After each parent returns, a learned policy (`policy.py`, the packaged file
`policies/NAME.json`) stops with the leading answer, runs the next prose voter, or verifies with the next program
voter; it decides alone (no other criterion or gate beside it), from what the run holds at that moment (answers,
their agreement, each reply's log-probability and length, whether it was cut, program-prose agreement)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import StringConstraints

from lemon.errors import LemonError
from lemon.spec.stops.base import StopCriterion, StopView
from lemon.spec.stops.policy import Moment, answer_kind_of, packaged_policy, policy_names


class Learned(StopCriterion):
    key = "learned"
    kind = "controller"
    value_type = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,39}$")]
    phrase = "learned (a packaged policy)"
    hint = "learned (e.g. number)"

    def least_parents(self, value: Any) -> int | None:
        return 1

    def problem(self, value: Any, max_parents: int | None) -> str | None:
        try:
            packaged_policy(value)
        except LemonError as exc:
            return str(exc)
        return None

    def variants(self, value: Any, limit: int) -> list[Any]:
        """Another packaged policy learned for the same answer kind, or none: the vote of every parent (a policy
        of another kind, e.g. `choice` on number voters, is not a rule a writer would choose there)."""
        kind = answer_kind_of(value)
        return [*(name for name in policy_names() if name != value and answer_kind_of(name) == kind), None]

    def describe(self, old: Any, new: Any) -> str:
        if old == new:
            return ""
        if new is None:
            return "; every parent runs, no learned policy stops them"
        return f"; the learned policy {new!r} decides instead of {old!r}"

    def first_parent(self, value: Any, view: StopView, order: Sequence[str]) -> tuple[str, dict[str, object] | None]:
        """The policy's opening voter (format 2): the first written one of the kind it opens with, where the team
        has one; a format-1 policy leaves the team's first written voter (no decision recorded)."""
        opening = packaged_policy(value).opening
        if opening is None:
            return order[0], None
        kind = [p for p in order if view.is_program(p) == (opening == "program")]
        chosen = (kind or list(order))[0]
        return chosen, {"after": [], "action": f"open with {opening}", "next": chosen}

    async def next_parent(self, value: Any, view: StopView, voter: str, ran: Sequence[str],
                          order: Sequence[str]) -> tuple[str | None, dict[str, object]]:
        """The parent to run next (None: stop), and the decision as the trace records it (its inputs, the
        action and the probability it was taken on)."""
        policy = packaged_policy(value)
        left = [p for p in order if p not in ran]
        prose = [p for p in left if not view.is_program(p)]
        programs = [p for p in left if view.is_program(p)]
        m = Moment(tuple(view.reply(p) for p in ran), len(prose), len(programs), view.task_chars())
        action, p = policy.decide(m)
        chosen = None if action == "stop" else (programs or prose)[0] if action == "verify" else (prose or programs)[0]
        return chosen, {"after": list(ran), "action": action, "p_right": round(p, 4), "next": chosen}


CRITERIA = (Learned(),)
