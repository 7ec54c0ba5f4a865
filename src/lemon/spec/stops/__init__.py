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

from lemon.registry import Registry
from lemon.spec.stops.base import StopCriterion, StopView, answer_counts

_FILES = (
    "agree",
    "confidence",
    "logprob",
    "examples",
    "learned",
    "posterior",
)


#: The modifiers a criterion's key may not take (they qualify the rule, `spec.model.StopRule`).
_MODIFIERS = ("max", "wave")
_REGISTRY: Registry[StopCriterion] = Registry.from_files("stop criterion", lambda c: c.key, __name__, _FILES,
                                                         "CRITERIA", reserved=_MODIFIERS)
#: Add a criterion defined elsewhere (its key new, not a modifier); or one for a `with` block (a test's own).
register, registered = _REGISTRY.register, _REGISTRY.registered


def criteria() -> tuple[StopCriterion, ...]:
    """Every registered criterion, in registry order."""
    return _REGISTRY.values()


def find_criterion(key: str) -> StopCriterion | None:
    return _REGISTRY.get(key)


__all__ = ["StopCriterion", "StopView", "answer_counts", "criteria", "find_criterion", "register", "registered"]
