"""What every counterfactual edit family is: one small Protocol, and the pieces they share.

A family changes exactly ONE field of a spec and returns the edited spec plus the span of that field in the
ORIGINAL canonical text: the span is where the reward contrast r(original) - r(edited) is credited. One file
per family (`edge.py`, `role.py`, `capacity.py`, `stop.py`, `copies.py`); the registry in `__init__.py` names the files.
The Protocol is the whole contract a caller may use (apply, describe, current value, the text an edit
rewrites, whether the edited agent's request changes), so no caller branches on field kinds or family names.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from lemon.errors import SpecError
from lemon.spec.copies import copy_groups
from lemon.spec.model import Agent, Spec
from lemon.spec.render import FieldKind, FieldRef, Span, render_spec

#: A family's name (`edge`, `role`, `capacity`, `level`, `stop`, `copies`, or one a new file registers).
Family = str


@dataclass(frozen=True, slots=True)
class Edit:
    """An edited spec and the field it changed; `span` is that field in `original`'s canonical text,
    rendered only when asked (the trainer carries the rendering of the completion it already has)."""

    spec: Spec
    family: Family
    field: FieldRef
    original: Spec

    @property
    def span(self) -> Span:
        return render_spec(self.original).spans[self.field]


class EditFamily(Protocol):
    """One family of single-field edits."""

    name: Family
    kind: FieldKind  # the kind of field it edits
    model_only: bool  # its field only picks the agent's model: an agent that calls none (a vote) has no such edit

    def fields(self, spec: Spec, levels: Sequence[str]) -> list[FieldRef]:
        """Every field of `spec` where this family applies, in spec order."""
        ...

    def apply(self, spec: Spec, ref: FieldRef, levels: Sequence[str], rng: random.Random | None = None) -> Edit:
        """The edit of `ref`: the family's deterministic operator, or with `rng` a drawn variant where the
        family has several (`level`'s target, `stop`'s k +/- 1). Raises `SpecError` when impossible."""
        ...

    def describe(self, spec: Spec, edited: Spec, ref: FieldRef) -> str:
        """The edit in words, for `lemon explain`, the training log and the viewer."""
        ...

    def value(self, spec: Spec, ref: FieldRef) -> str | None:
        """What `ref` holds in `spec` as the canonical text writes it; None when absent."""
        ...

    def rewrite(self, text: str, start: int, end: int, replacement: str) -> tuple[int, int, str]:
        """The characters the edit rewrites in the canonical text (the field's span is [start, end)) and
        what it writes there, so the edited text is the canonical rendering of the edited spec."""
        ...

    def changes_request(self, spec: Spec, edited: Spec, ref: FieldRef, model_of: Callable[[str], str]) -> bool:
        """Whether the edited agent's own request changes (a re-run then recomputes it and its descendants);
        `model_of` maps a level to the model serving it."""
        ...


class FieldEdits:
    """The defaults most families share: an edit rewrites its field in place and changes its agent's request."""

    model_only: bool = False

    def rewrite(self, text: str, start: int, end: int, replacement: str) -> tuple[int, int, str]:
        return start, end, replacement

    def changes_request(self, spec: Spec, edited: Spec, ref: FieldRef, model_of: Callable[[str], str]) -> bool:
        return True


def agent_of(spec: Spec, name: str) -> Agent:
    try:
        return spec.agent(name)
    except KeyError:
        raise SpecError(f"no agent is named {name!r}") from None


def replace_agent(spec: Spec, name: str, **update: object) -> Spec:
    agents = tuple(a.model_copy(update=update) if a.name == name else a for a in spec.agents)
    return spec.model_copy(update={"agents": agents})


def make_edit(spec: Spec, family: Family, ref: FieldRef, **update: object) -> Edit:
    """`ref`'s agent updated; the span is rendered from `spec` only when a caller asks for it. A field written
    once for a `copies` block (its role, duty or level) is one decision: every copy gets the update."""
    edited = spec
    for name in block_of(spec, ref.agent) if ref.kind not in ("edge", "stop", "copies") else (ref.agent,):
        edited = replace_agent(edited, name, **update)
    return Edit(edited, family, ref, spec)


def block_of(spec: Spec, name: str) -> tuple[str, ...]:
    """The agents written as one block with `name`: its `copies` group, or itself."""
    return next((g.names for g in copy_groups(spec) if name in g.names), (name,))


def same_written_field(spec: Spec, refs: list[FieldRef]) -> list[FieldRef]:
    """`refs` without those written in the same place as an earlier one (the copies of one block)."""
    spans = render_spec(spec).spans
    seen: set[tuple[str, int, int]] = set()
    out: list[FieldRef] = []
    for r in refs:
        key = (r.kind, spans[r].start, spans[r].end)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out
