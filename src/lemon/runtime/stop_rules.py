"""A stop rule at run time: what a run tells the rule's criteria (`RunStopView`), and a gate's record (`SureGate`).

The criteria themselves are objects of `lemon.spec.stops`: each decides through a `StopView`, which the executor
provides here for one voter of one run. The `logprob` gate's part: which parent, if any, the model was sure of.

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

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lemon.llm.base import Backend, ChatRequest, can_score
from lemon.llm.pool import Pool
from lemon.runtime.examples_gate import TaskExamples, sandbox_refusal, task_examples
from lemon.runtime.trace import AgentTokens
from lemon.spec.model import Agent, Spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.stops.policy import Reply


@dataclass
class SureGate:
    """One voter's gate in one run: the scores so far (None for a parent that calls no model) and the sure one."""

    threshold: float
    scores: dict[str, float | None] = field(default_factory=dict)
    sure: str | None = None

    def record(self, parent: str, score: float | None) -> bool:
        """Keep `parent`'s score; True (and `sure` set) when it is the first parent at or above the threshold."""
        self.scores[parent] = score
        if self.sure is None and score is not None and score >= self.threshold:
            self.sure = parent
        return self.sure == parent


def gate_refusal(voter: Agent, parents: Sequence[str], spec: Spec, pool: Pool, roles: RoleLibrary,
                 what: str = "logprob gate") -> str | None:
    """Why `voter`'s gate (or another part of its rule that scores replies, `what`: "posterior criterion")
    cannot run on this pool (one line naming the level and the fix), or None: every model-calling parent's level
    must be a `Scorer` (an embedded llama.cpp model, or the LLM cache in front of one). Checked before any
    parent runs, so a run that cannot gate spends nothing."""
    for name in parents:
        parent = spec.agent(name)
        if not roles[parent.role].calls_model:
            continue  # calls no model: never sure, never scored
        backend = pool.backend(parent.capacity)
        if not can_score(backend):
            return (f"agent {voter.name!r}, field stop: its {what} reads each parent's reply log-probability, and "
                    f"level {parent.capacity!r} ({backend.model_id}) gives none (an embedded llama.cpp model does, "
                    "and an OpenAI-compatible level whose server returns them, marked `logprobs: true` in the "
                    f"pool); serve that level so, or remove {what.split()[0]} from the rule")
    return None


class _Run(Protocol):
    """What a view needs of the executor's run (`executor._Run`): read only (properties, so the run's own dicts
    match the read-only mappings named here)."""

    @property
    def task(self) -> str: ...

    @property
    def spec(self) -> Spec: ...

    @property
    def outputs(self) -> Mapping[str, str]: ...

    @property
    def logprobs(self) -> Mapping[str, float]: ...

    @property
    def tokens(self) -> Mapping[str, AgentTokens]: ...

    @property
    def requests(self) -> Mapping[str, tuple[Backend, ChatRequest]]: ...

    @property
    def pool(self) -> Pool: ...

    @property
    def roles(self) -> RoleLibrary: ...

    def _vote_key_of(self, text: str) -> str | None: ...

    async def score_reply(self, agent: Agent, p: str) -> float | None: ...

    async def check_examples(self, p: str, examples: TaskExamples) -> bool: ...


class RunStopView:
    """`lemon.spec.stops.StopView` for one voter of one run: what its rule's criteria may ask (the task's
    examples are read once, when the gate first asks)."""

    def __init__(self, run: _Run, voter: Agent) -> None:
        self.run = run
        self.voter = voter
        self._examples: tuple[TaskExamples | None] | None = None
        self._scores: dict[str, float | None] = {}  # a criterion asks again after each wave: one pass each

    def keys(self, parents: Sequence[str]) -> list[str | None]:
        return [self.run._vote_key_of(self.run.outputs[p]) for p in parents]

    def scoring_refusal(self, voter: str, parents: Sequence[str], what: str = "logprob gate") -> str | None:
        return gate_refusal(self.voter, parents, self.run.spec, self.run.pool, self.run.roles, what)

    async def score(self, parent: str) -> float | None:
        if parent not in self._scores:
            self._scores[parent] = await self.run.score_reply(self.voter, parent)
        return self._scores[parent]

    def examples(self) -> TaskExamples | None:
        if self._examples is None:
            self._examples = (task_examples(self.run.task),)
        return self._examples[0]

    async def examples_refusal(self, voter: str) -> str | None:
        if self.examples() is None:
            return None
        return await asyncio.to_thread(sandbox_refusal, voter)

    async def passes_examples(self, parent: str) -> bool | None:
        examples = self.examples()
        return None if examples is None else await self.run.check_examples(parent, examples)

    def is_program(self, parent: str) -> bool:
        return self.run.roles[self.run.spec.agent(parent).role].runs_program

    def reply(self, parent: str) -> Reply:
        """What a controller sees of a parent that ran; cut: it used the whole reply limit its request had."""
        tokens = self.run.tokens[parent]["completion"]
        sent = self.run.requests.get(parent)
        limit = sent[1].params.max_tokens if sent is not None else None
        return Reply(self.is_program(parent), self.keys([parent])[0], self.run.logprobs.get(parent), tokens,
                     limit is not None and tokens >= limit)

    def task_chars(self) -> int:
        return len(self.run.task)
