"""Stop criteria, registered once: one file per criterion behind `StopCriterion` (`base.py`), and this registry.

- `agree` (k parents gave the same answer), `confidence` (the leading answer's posterior), `posterior` (the
  vote's answer's posterior with each reply weighed by its per-token probability, after CGES): criteria;
- `logprob` (a reply the model was sure of), `examples` (a program that passes the task's examples): gates;
- `learned` (a packaged policy that stops, runs the next voter or verifies after each parent): a controller.

A new criterion is one file exposing `CRITERIA` plus one line in `_FILES`; one defined elsewhere (a test, a
plug-in) enters with `register` (or `registered`, which takes it out again). Everything else asks the registry:
the rule's validation, dump and canonical text (`lemon.spec.model.StopRule`, `lemon.spec.render.render_stop`),
the graph checks (`validate.py`), the counterfactual edits (`edits/stop.py`) and the runtime
(`runtime.executor._Run._parents_until_stop`, through a `StopView`). The order of `_FILES` is the order of the
keys in a rule's dump; a rule's text writes its gate first, then its criterion.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

from lemon.spec.stops.base import StopCriterion, StopView, answer_counts

_FILES = (
    "agree",
    "confidence",
    "logprob",
    "examples",
    "learned",
    "posterior",
)


def _load() -> dict[str, StopCriterion]:
    found = [c for name in _FILES for c in importlib.import_module(f"{__name__}.{name}").CRITERIA]
    return {c.key: c for c in found}


_TABLE = _load()


def criteria() -> tuple[StopCriterion, ...]:
    """Every registered criterion, in registry order."""
    return tuple(_TABLE.values())


def find_criterion(key: str) -> StopCriterion | None:
    return _TABLE.get(key)


def register(criterion: StopCriterion) -> StopCriterion:
    """Add a criterion defined elsewhere; its key must be new (and not a modifier: max, wave)."""
    if criterion.key in _TABLE or criterion.key in ("max", "wave"):
        raise ValueError(f"stop criterion {criterion.key!r} is registered already")
    _TABLE[criterion.key] = criterion
    return criterion


@contextmanager
def registered(criterion: StopCriterion) -> Iterator[StopCriterion]:
    """`criterion` registered for the duration of a `with` block (a test's own), then taken out again."""
    register(criterion)
    try:
        yield criterion
    finally:
        _TABLE.pop(criterion.key, None)


__all__ = ["StopCriterion", "StopView", "answer_counts", "criteria", "find_criterion", "register", "registered"]
