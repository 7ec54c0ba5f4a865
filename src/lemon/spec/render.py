"""The canonical text of a spec, and where each editable field sits in it.

Fixed key order and fixed quoting make the rendering a function of the spec alone, so the orchestrator is
trained to write exactly this text and every editable field (each role, duty, capacity, dependency edge and stop rule)
has a known character span. The counterfactual credit is applied to the tokens under those spans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lemon.spec.model import Spec, StopRule

FieldKind = Literal["role", "duty", "capacity", "edge", "stop"]


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
    """A stop rule as a one-line YAML flow mapping, fixed key order, defaults left out (fewer spec tokens)."""
    parts = [f"agree: {rule.agree}" if rule.agree is not None else f"confidence: {rule.confidence!r}"]
    if rule.max is not None:
        parts.append(f"max: {rule.max}")
    if rule.wave != 1:
        parts.append(f"wave: {rule.wave}")
    return "{" + ", ".join(parts) + "}"


def render_spec(spec: Spec) -> RenderedSpec:
    """Canonical YAML of `spec` with the span of every editable field.

    `text[span.start:span.end]` is exactly the field's value (the duty without its quotes; for an edge, the
    parent's name inside the child's `depends_on` list).
    """
    w = _Writer()
    spans: dict[FieldRef, Span] = {}
    w.write("agents:\n")
    for a in spec.agents:
        w.write(f"  - name: {a.name}\n    role: ")
        spans[FieldRef("role", a.name)] = w.write(a.role)
        w.write('\n    duty: "')
        spans[FieldRef("duty", a.name)] = w.write(a.duty)
        w.write('"\n    capacity: ')
        spans[FieldRef("capacity", a.name)] = w.write(a.capacity)
        w.write("\n    depends_on: [")
        for i, p in enumerate(a.depends_on):
            if i:
                w.write(", ")
            spans[FieldRef("edge", a.name, p)] = w.write(p)
        w.write("]\n")
        if a.stop is not None:
            w.write("    stop: ")
            spans[FieldRef("stop", a.name)] = w.write(render_stop(a.stop))
            w.write("\n")
    if spec.output is not None:
        w.write(f"output: {spec.output}\n")
    return RenderedSpec("".join(w.parts), spans)
