"""Single agents: `vanilla` (the kind's primary role as is) and `cot` (the same role asked to think step by step)."""

from __future__ import annotations

from lemon.evaluation.baselines.base import COT_DUTY, BaselineKind
from lemon.orchestrator.kinds import AnswerKind
from lemon.spec.model import Agent, Spec


def _vanilla(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    return Spec(agents=(Agent(name="solver", role=kind.roles[1], duty="", capacity=level),), output="solver")


def _cot(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    return Spec(agents=(Agent(name="solver", role=kind.roles[1], duty=COT_DUTY, capacity=level),),
                output="solver")


BASELINES = (
    BaselineKind("vanilla", "one agent, the answer kind's primary role, no duty", _vanilla),
    BaselineKind("cot", "one agent, the primary role asked to think step by step", _cot),
)
