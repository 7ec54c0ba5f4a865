"""`BaselineKind`: one fixed baseline as one object (issue 53), and what the baseline files share.

Why an object: a baseline's facts (its spec, its default size and bounds, the answer kinds it answers, whether
its agents write programs or its stop rule reads reply scores) used to sit in parallel tables keyed by its
name (`_BUILDERS`, `DEFAULT_N`, `_VOTES`, `_PROGRAM_METHODS`, `_CODE_METHODS`, `methods.BASELINES`), so a new
baseline was an edit in six places and a forgotten one a silent default. Now each is one `BaselineKind` in its
family's file, and the registry (`baselines/__init__.py`) and every caller ask it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lemon.errors import LemonError
from lemon.orchestrator.kinds import AnswerKind, answer_kind, kind_names
from lemon.spec.model import MAX_AGENTS, Spec

COT_DUTY = "Think step by step, then give the final answer."

#: How a baseline writes its spec: (the benchmark's answer kind, every agent's level, n agents, seed) -> Spec.
#: `n` is the size for a sized baseline (0 for a fixed shape); `seed` matters to `random` alone.
Builder = Callable[[AnswerKind, str, int, int], Spec]


@dataclass(frozen=True)
class BaselineKind:
    """One fixed baseline (a `--method` value whose spec is fixed; `baselines/__init__.py` says each).

    `default_n` None is a fixed shape (`n` does not apply); else `n` (voters, or agents) defaults to it and must
    lie in [`least_n`, `most_n`] (a vote agent takes one of the spec's `MAX_AGENTS`). `program_voters`: its
    agents write programs, so it answers only the kinds with a program role (numbers); `runs_examples`: it runs
    the task's own examples, so only the kinds whose tasks show them (code); `instead` is what the one-line
    refusal suggests for another kind. `scores_replies`: its stop rule reads each reply's log-probability, so it
    needs a pool whose levels score replies (the runtime refuses the rule on one that does not,
    `runtime.stop_rules.gate_refusal`)."""

    name: str
    description: str
    build: Builder
    default_n: int | None = None
    least_n: int = 2
    most_n: int = MAX_AGENTS
    program_voters: bool = False
    runs_examples: bool = False
    scores_replies: bool = False
    instead: str = "esc"

    def applies_to(self, kind: AnswerKind) -> bool:
        """Whether this baseline has a spec for a benchmark whose answers are of `kind`."""
        if self.runs_examples and not kind.runs_examples:
            return False
        return not (self.program_voters and kind.program_role is None)

    def refusal(self, kind: AnswerKind) -> str:
        """The one line for a kind it does not answer: which kinds it does, and what to use instead."""
        answered = ", ".join(k for k in kind_names() if self.applies_to(answer_kind(k))) or "no"
        why = ("runs programs on a task's examples" if self.runs_examples else
               "writes programs (program of thought)")
        return (f"{self.name} {why}: it answers {answered} benchmarks only, not {kind.name!r} ones; "
                f"use {self.instead} there")

    def spec(self, kind: str, *, level: str, seed: int = 0, n: int | None = None) -> Spec:
        """The fixed spec for a benchmark whose answers are of `kind`, every agent at `level`: `n` agents for a
        sized baseline (None: `default_n`; ignored by a fixed shape); a one-line LemonError for an unknown kind,
        a kind it does not answer, or `n` out of its bounds."""
        found = answer_kind(kind)
        if not self.applies_to(found):
            raise LemonError(self.refusal(found))
        if self.default_n is None:
            return self.build(found, level, 0, seed)
        n = self.default_n if n is None else n
        if not self.least_n <= n <= self.most_n:
            raise LemonError(f"baseline {self.name!r}: n must be in [{self.least_n}, {self.most_n}], got {n}")
        return self.build(found, level, n, seed)
