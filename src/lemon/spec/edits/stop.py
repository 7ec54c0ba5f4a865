"""`stop` (ours): change one voter's stop rule, so credit has a field whose right value depends on the task.

The deterministic operator removes the rule (every parent runs: Δ says what stopping early cost or saved on
this item). Drawn variants move the rule by one notch: `agree` k +/- 1, or `max` +/- 2 (an absent max is the
number of parents), clamped to what validates (k >= 2, k <= max <= the parents); a `logprob` gate moves by
+/- 5 nats (clamped to its bounds) or is dropped where another criterion remains, as is an `examples` gate. Only
variants that validate are offered."""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import ValidationError

from lemon.errors import SpecError
from lemon.spec.edits.base import Edit, EditFamily, Family, FieldEdits, agent_of, make_edit
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.render import FieldKind, FieldRef, render_stop
from lemon.spec.stops import criteria


def remove_stop(spec: Spec, agent: str) -> Edit:
    """`agent` votes over all of its parents: every one of them runs."""
    if agent_of(spec, agent).stop is None:
        raise SpecError(f"cannot remove the stop rule: agent {agent!r} has none")
    return make_edit(spec, "stop", FieldRef("stop", agent), stop=None)


def stop_variants(agent: Agent) -> list[StopRule]:
    """The rules one notch from `agent`'s: its criterion's variants (agree k +/- 1), max +/- 2 (clamped), its
    gate's variants (logprob -/+ 5, clamped, or the gate dropped; an examples gate dropped), each within the
    agent's parents (each criterion says its own: `lemon.spec.stops`); only rules that validate there."""
    rule = agent.stop
    if rule is None:
        return []
    n = len(agent.depends_on)
    limit = rule.max if rule.max is not None else n
    updates: list[dict[str, object]] = []
    if (found := rule.criterion) is not None:
        updates += [{found[0].key: v} for v in found[0].variants(found[1], limit)]
    updates += [{"max": None if m == n else m}
                for m in sorted({max(limit - 2, rule.least_parents), min(limit + 2, n)} - {limit})]
    if (found := rule.gate) is not None:
        updates += [{found[0].key: v} for v in found[0].variants(found[1], limit)]
    if (found := rule.controller) is not None:  # another packaged policy (none at all is `remove_stop`)
        updates += [{found[0].key: v} for v in found[0].variants(found[1], limit)]
    return [v for u in updates if (v := _variant(rule, u, n)) is not None]


def _variant(rule: StopRule, update: dict[str, object], parents: int) -> StopRule | None:
    """`rule` with `update`, validated as a written rule would be (None when it would not be one)."""
    try:
        new = StopRule.model_validate({**rule.model_dump(), **update})
    except ValidationError:
        return None
    limit = new.max if new.max is not None else parents
    return new if new.least_parents <= limit else None


def describe_change(old: StopRule, new: StopRule) -> str:
    """What the change of each criterion does, in words, as the criteria say it (a `logprob` gate's move;
    empty when nothing worth saying changed)."""
    return "".join(c.describe(old.values.get(c.key), new.values.get(c.key)) for c in criteria())


class StopFamily(FieldEdits):
    name: Family = "stop"
    kind: FieldKind = "stop"

    def fields(self, spec: Spec, levels: Sequence[str]) -> list[FieldRef]:
        return [FieldRef("stop", a.name) for a in spec.agents if a.stop is not None]

    def apply(self, spec: Spec, ref: FieldRef, levels: Sequence[str], rng: random.Random | None = None) -> Edit:
        if rng is None:
            return remove_stop(spec, ref.agent)
        agent = agent_of(spec, ref.agent)
        choices: list[StopRule | None] = [None, *stop_variants(agent)]
        return make_edit(spec, "stop", ref, stop=rng.choice(choices))

    def describe(self, spec: Spec, edited: Spec, ref: FieldRef) -> str:
        old, new = spec.agent(ref.agent).stop, edited.agent(ref.agent).stop
        before = render_stop(old) if old else "none"
        if new is None:
            return f"remove the stop rule of {ref.agent} ({before}): every parent runs"
        gate = describe_change(old, new) if old else ""
        return f"change the stop rule of {ref.agent}: {before} -> {render_stop(new)}{gate}"

    def value(self, spec: Spec, ref: FieldRef) -> str | None:
        rule = spec.agent(ref.agent).stop
        return render_stop(rule) if rule is not None else None

    def rewrite(self, text: str, start: int, end: int, replacement: str) -> tuple[int, int, str]:
        """A removed stop rule takes its whole `stop:` line with it; a changed one is rewritten in place."""
        if replacement:
            return start, end, replacement
        line = text.rfind("\n", 0, start) + 1
        return line, end + (text[end:end + 1] == "\n"), ""


FAMILIES: tuple[EditFamily, ...] = (StopFamily(),)
