"""A stop rule's `logprob` gate at run time: which parent, if any, the model was sure of.

The executor (`executor._Run._parents_until_stop`) runs a voter's parents in waves; with a gate, each newly run
parent's reply is scored under the model that wrote it (`lemon.llm.base.Scorer`: the sum of the reply's token
log-probabilities given the exact request it answered), and the first parent, in written order, whose score is
>= the rule's `logprob` is sure: it fires the rule and the vote sees it alone.

Scoring adds no tokens and is charged to no budget: a sampler that returns log-probabilities with each sample
would cost nothing more, and here the same numbers come from one teacher-forced pass over a reply that was
already paid for (on the CPU that pass takes time, not tokens; the LLM cache keeps each score, so a re-run of
the same parent rescores from the file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lemon.llm.base import can_score
from lemon.llm.pool import Pool
from lemon.spec.model import Agent, Spec
from lemon.spec.roles import RoleLibrary


@dataclass
class SureGate:
    """One voter's gate in one run: the scores so far (None for a parent that calls no model) and the sure one."""

    threshold: int
    scores: dict[str, float | None] = field(default_factory=dict)
    sure: str | None = None

    def record(self, parent: str, score: float | None) -> bool:
        """Keep `parent`'s score; True (and `sure` set) when it is the first parent at or above the threshold."""
        self.scores[parent] = score
        if self.sure is None and score is not None and score >= self.threshold:
            self.sure = parent
        return self.sure == parent


def gate_refusal(voter: Agent, parents: Sequence[str], spec: Spec, pool: Pool, roles: RoleLibrary) -> str | None:
    """Why `voter`'s gate cannot run on this pool (one line naming the level and the fix), or None: every
    model-calling parent's level must be a `Scorer` (an embedded llama.cpp model, or the LLM cache in front
    of one). Checked before any parent runs, so a run that cannot gate spends nothing."""
    for name in parents:
        parent = spec.agent(name)
        if roles[parent.role].kind == "vote":
            continue  # calls no model: never sure, never scored
        backend = pool.backend(parent.capacity)
        if not can_score(backend):
            return (f"agent {voter.name!r}, field stop: its logprob gate scores each parent's reply, and level "
                    f"{parent.capacity!r} ({backend.model_id}) cannot score replies (only an embedded llama.cpp "
                    "model can); serve that level embedded, or remove logprob from the rule")
    return None
