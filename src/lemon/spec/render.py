"""The canonical text of a spec, and where each editable field sits in it.

Fixed key order and fixed quoting make the rendering a function of the spec alone, so the orchestrator is
trained to write exactly this text and every editable field (each role, duty, capacity, dependency edge and stop rule)
has a known character span. The counterfactual credit is applied to the tokens under those spans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lemon.spec.copies import copy_groups
from lemon.spec.model import Agent, Spec, StopRule

FieldKind = Literal["role", "duty", "capacity", "edge", "stop", "copies"]


@dataclass(frozen=True, slots=True, order=True)
class FieldRef:
    """One editable field: `kind` of `agent` (for an edge, `parent` is the agent depended on)."""

    kind: FieldKind
    agent: str
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class Span:
    """Character offsets [start, end) into the canonical text."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RenderedSpec:
    text: str
    spans: dict[FieldRef, Span]


class _Writer:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.pos = 0

    def write(self, s: str) -> Span:
        start = self.pos
        self.parts.append(s)
        self.pos += len(s)
        return Span(start, self.pos)


def render_stop(rule: StopRule) -> str:
    """A stop rule as a one-line YAML flow mapping, fixed key order (the gate first, as it is checked first;
    then the criterion, max, wave; each criterion writes its own part), defaults left out (fewer spec tokens)."""
    parts = [found[0].render(found[1]) for found in (rule.gate, rule.criterion, rule.controller)
             if found is not None]
    if rule.max is not None:
        parts.append(f"max: {rule.max}")
    if rule.wave != 1:
        parts.append(f"wave: {rule.wave}")
    return "{" + ", ".join(parts) + "}"


def _write_parents(w: _Writer, parents: list[str]) -> dict[str, Span]:
    """The `depends_on` line and each parent's span; no line for a root agent (no parents is the default)."""
    if not parents:
        return {}
    w.write("    depends_on: [")
    spans: dict[str, Span] = {}
    for i, p in enumerate(parents):
        if i:
            w.write(", ")
        spans[p] = w.write(p)
    w.write("]\n")
    return spans


def _block(w: _Writer, spans: dict[FieldRef, Span], a: Agent, names: tuple[str, ...], written: str,
           folded: dict[str, str]) -> None:
    """One agent's block; `names` are the agents it stands for (its copies, or itself), `written` its name."""
    w.write(f"  - name: {written}\n")
    if len(names) > 1:
        w.write("    copies: ")
        spans[FieldRef("copies", names[0])] = w.write(str(len(names)))
        w.write("\n")
    w.write("    role: ")
    role = w.write(a.role)
    duty = None
    if a.duty:  # an empty duty (the base role as is) is the default: not written, no span
        w.write('\n    duty: "')
        duty = w.write(a.duty)
        w.write('"')
    w.write("\n    capacity: ")
    capacity = w.write(a.capacity)
    w.write("\n")
    shown = [folded.get(p, p) for p in a.depends_on]
    edge_spans = _write_parents(w, list(dict.fromkeys(shown)))  # a folded group is written once
    for n in names:
        spans[FieldRef("role", n)], spans[FieldRef("capacity", n)] = role, capacity
        if duty is not None:
            spans[FieldRef("duty", n)] = duty
        for p, q in zip(a.depends_on, shown, strict=True):
            spans[FieldRef("edge", n, p)] = edge_spans[q]
    if a.stop is not None:
        w.write("    stop: ")
        spans[FieldRef("stop", names[0])] = w.write(render_stop(a.stop))
        w.write("\n")


def render_spec(spec: Spec) -> RenderedSpec:
    """Canonical YAML of `spec` with the span of every editable field.

    `text[span.start:span.end]` is exactly the field's value (the duty without its quotes; for an edge, the
    parent's name inside the child's `depends_on` list). Defaults are left out, because spec tokens are cost
    the policy pays on every task: an empty duty and an empty `depends_on` are not written (and have no
    span). A run of identical agents `x_1 .. x_n` is written once with `copies: n` (`lemon.spec.copies`):
    each copy's field maps to the one written value, and an edge to any copy to the group's name in the
    child's list.
    """
    w = _Writer()
    spans: dict[FieldRef, Span] = {}
    groups = {g.names[0]: g for g in copy_groups(spec)}
    folded = {n: g.base for g in groups.values() for n in g.names}
    w.write("agents:\n")
    for a in spec.agents:
        if a.name in folded and a.name not in groups:
            continue  # a later copy: written by its group's block
        group = groups.get(a.name)
        _block(w, spans, a, group.names if group else (a.name,), group.base if group else a.name, folded)
    if spec.output is not None:
        w.write(f"output: {spec.output}\n")
    return RenderedSpec("".join(w.parts), spans)
