"""Rollouts of one GRPO group: parse the sampled specs, execute them, score them, run counterfactuals.

No torch here: this is the part the trainer and `benchmarks/bench_train.py` share, so the measured token
cost of counterfactual credit is the cost of exactly the code that trains. Per group (one task, G sampled
completions):

1. Each completion is read strictly (`strict_spec`: parse + validate as written, no repair). An invalid one
   gets the invalid penalty, is not executed and gets no counterfactual.
2. Ablation overrides (`Ablation`) rewrite the valid specs (fixed roles / capacity / structure), then all
   of them run concurrently through ONE node cache shared by the group, with the same worker seed, so an
   agent two specs have in common (same role, duty, level and parents' outputs) is computed once.
3. Counterfactuals (unless disabled): valid specs are visited in a seeded random order; for each, an edit
   family is drawn by the adaptive sampler among the families with an applicable field, a field is drawn
   uniformly, and the edited spec is re-executed through the same node cache, so only the edited agent and
   its descendants are recomputed. Δ = r(original) - r(edited). A re-run whose estimated cost would exceed
   the group's counterfactual budget (`credit.cf_budget`) is skipped.
4. The credit lands on the character span of the edited field in the ORIGINAL completion: the canonical
   rendering of the parsed spec must occur verbatim in the completion (it does whenever the policy wrote the
   canonical format it is trained on); a valid spec written in another layout gets no counterfactual.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from lemon.errors import SpecError
from lemon.orchestrator.policy_prompt import strict_spec
from lemon.runtime import Executor, NodeCache, RunResult
from lemon.runtime.executor import required_agents
from lemon.spec.edits import applicable_edits, apply_edit
from lemon.spec.model import Spec
from lemon.spec.render import FieldRef, render_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from lemon.train.config import RewardConfig
from lemon.train.reward import RewardBreakdown, compute_reward
from lemon.train.sampler import AdaptiveFamilySampler
from lemon.train.tasks import TrainTask, is_correct

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ablation:
    """Ablation flags; they rewrite a valid sampled spec before it runs (and before any counterfactual).

    - `fixed_roles`: every agent keeps its base role only (its duty is emptied); the role family (m_R) then
      has nothing to edit.
    - `fixed_capacity`: every agent runs at this level; the capacity family (m_L) is disabled.
    - `fixed_structure="chain"`: the agents, in the order written, become a chain (each depends on the one
      before it, the last is the output); the edge family (m_E) is disabled.
    The policy's tokens for the overridden fields still get the group advantage (of the rewritten spec).
    """

    fixed_roles: bool = False
    fixed_capacity: str | None = None
    fixed_structure: Literal["chain"] | None = None

    def apply(self, spec: Spec, roles: RoleLibrary, levels: Sequence[str]) -> Spec:
        if not (self.fixed_roles or self.fixed_capacity or self.fixed_structure):
            return spec
        agents = []
        for i, a in enumerate(spec.agents):
            update: dict[str, object] = {}
            if self.fixed_roles:
                update["duty"] = ""
            if self.fixed_capacity:
                update["capacity"] = self.fixed_capacity
            if self.fixed_structure == "chain":
                update["depends_on"] = (spec.agents[i - 1].name,) if i else ()
            agents.append(a.model_copy(update=update))
        output = agents[-1].name if self.fixed_structure == "chain" else spec.output
        if self.fixed_structure == "chain":  # a vote agent first in a chain would have no parent to vote over
            agents = [a.model_copy(update={"role": "generalist"}) if roles[a.role].kind == "vote" and
                      not a.depends_on else a for a in agents]
        return validate_spec(Spec(agents=tuple(agents), output=output), roles, levels)

    def families(self, families: Sequence[str]) -> tuple[str, ...]:
        """The counterfactual families that still mean something under this ablation."""
        off = {"role"} if self.fixed_roles else set()
        if self.fixed_capacity:
            off.add("capacity")
        if self.fixed_structure:
            off.add("edge")
        return tuple(f for f in families if f not in off)

    def as_dict(self) -> dict[str, object]:
        return {"fixed_roles": self.fixed_roles, "fixed_capacity": self.fixed_capacity,
                "fixed_structure": self.fixed_structure}


@dataclass(frozen=True)
class Counterfactual:
    """One executed edit of a sample: Δ and the edited field's character span in the completion."""

    family: str
    field: FieldRef
    char_start: int
    char_end: int
    delta: float
    edited_reward: float
    spent_tokens: int
    estimated_tokens: int
    cache_hits: int
    calls: int


@dataclass
class Sample:
    """One sampled completion of a group and everything measured about it."""

    completion: str
    valid: bool
    error: str | None = None
    spec: Spec | None = None              # the spec as executed (after ablation overrides)
    reward: RewardBreakdown | None = None
    correct: bool = False
    status: str = "invalid"
    total_tokens: int = 0                  # intrinsic cost of the spec (cache hits included)
    spent_tokens: int = 0                  # computed in this rollout
    cache_hits: int = 0
    calls: int = 0
    canonical_at: int | None = None        # where the canonical text starts in the completion, if it does
    cf: Counterfactual | None = None
    cf_skip: str | None = None             # why no counterfactual was run for a valid spec

    @property
    def total_reward(self) -> float:
        assert self.reward is not None
        return self.reward.total


@dataclass
class GroupResult:
    task_id: str
    samples: list[Sample]
    cf_budget_tokens: float | None = None
    sampler_probs: dict[str, float] = field(default_factory=dict)

    @property
    def rewards(self) -> list[float]:
        return [s.total_reward for s in self.samples]


@dataclass(frozen=True)
class RolloutSettings:
    """What the rollout needs besides the executor: reward coefficients, credit switches, seeds."""

    reward: RewardConfig
    cf_enabled: bool = True
    cf_budget: float | None = 0.2
    ablation: Ablation = Ablation()


def n_edges(spec: Spec) -> int:
    return sum(len(a.depends_on) for a in spec.agents)


def _spans_in_completion(parsed: Spec, completion: str) -> int | None:
    """Offset of the canonical text of `parsed` inside the completion, or None if it was written otherwise."""
    idx = completion.find(render_spec(parsed).text)
    return idx if idx >= 0 else None


def estimate_rerun_tokens(spec: Spec, ref: FieldRef, edited: Spec, original: RunResult,
                          executor: Executor) -> int:
    """Worker tokens a re-run of `edited` will compute: the original tokens of the agents the edit invalidates.

    An edit changes the request of its agent and, through its output, of every descendant the edited spec
    still runs; everything else is a node-cache hit. A capacity edit between two levels served by the same
    model changes no request at all (costs nothing).
    """
    if ref.kind == "capacity":
        old = spec.agent(ref.agent).capacity
        new = edited.agent(ref.agent).capacity
        pool = executor.pool
        if pool.backend(old).model_id == pool.backend(new).model_id:
            return 0
    needed = required_agents(edited)
    affected = ({ref.agent} | spec.descendants(ref.agent)) & needed
    tokens = original.tokens_by_agent
    return sum(int(tokens[a]["prompt"]) + int(tokens[a]["completion"]) for a in affected if a in tokens)


async def _execute(executor: Executor, spec: Spec, task: TrainTask, cache: NodeCache,
                   seed: int) -> tuple[RunResult, bool]:
    run = await executor.run(spec, task.prompt, seed=seed, vote_key=task.vote_key, task_id=task.id,
                             node_cache=cache)
    correct = run.status == "ok" and await is_correct(task, run.answer)
    return run, correct


def _score(run: RunResult, correct: bool, spec: Spec, cfg: RewardConfig) -> RewardBreakdown:
    return compute_reward(correct if run.status == "ok" else None, run.total_tokens, len(spec.agents),
                          n_edges(spec), True, cfg)


async def rollout_group(executor: Executor, task: TrainTask, completions: Sequence[str], *,
                        roles: RoleLibrary, settings: RolloutSettings,
                        sampler: AdaptiveFamilySampler | None, rng: random.Random,
                        seed: int = 0) -> GroupResult:
    """Score one group of completions for `task` (see the module docstring for the exact procedure)."""
    levels = executor.pool.level_names
    samples: list[Sample] = []
    parsed_specs: list[Spec | None] = []
    for text in completions:
        res = strict_spec(text, roles, levels)
        if res.spec is None or res.parsed is None:
            samples.append(Sample(completion=text, valid=False, error=res.error,
                                  reward=compute_reward(None, 0, 0, 0, False, settings.reward)))
            parsed_specs.append(None)
            continue
        try:
            spec = settings.ablation.apply(res.spec, roles, levels)
        except SpecError as exc:  # cannot happen for a valid spec; kept loud rather than silent
            raise SpecError(f"ablation produced an invalid spec: {exc}") from None
        samples.append(Sample(completion=text, valid=True, spec=spec,
                              canonical_at=_spans_in_completion(res.parsed, text)))
        parsed_specs.append(res.parsed)

    cache = NodeCache()
    valid_idx = [i for i, s in enumerate(samples) if s.valid]
    runs = await asyncio.gather(*(_execute(executor, samples[i].spec, task, cache, seed)  # type: ignore[arg-type]
                                  for i in valid_idx))
    originals: dict[int, RunResult] = {}
    for i, (run, correct) in zip(valid_idx, runs, strict=True):
        s = samples[i]
        assert s.spec is not None
        originals[i] = run
        s.correct, s.status = correct, run.status
        s.total_tokens, s.spent_tokens, s.cache_hits, s.calls = (run.total_tokens, run.spent_tokens,
                                                                  run.cache_hits, run.calls)
        s.reward = _score(run, correct, s.spec, settings.reward)

    group = GroupResult(task_id=task.id, samples=samples)
    if not settings.cf_enabled or sampler is None or not valid_idx:
        for i in valid_idx:
            samples[i].cf_skip = "disabled" if not settings.cf_enabled or sampler is None else None
        return group
    group.sampler_probs = sampler.probabilities()
    budget = None if settings.cf_budget is None else settings.cf_budget * sum(
        samples[i].total_tokens for i in valid_idx)
    group.cf_budget_tokens = budget
    planned: list[tuple[int, str, FieldRef, Spec, int, int, int]] = []
    used = 0
    order = list(valid_idx)
    rng.shuffle(order)
    for i in order:
        s, parsed = samples[i], parsed_specs[i]
        assert s.spec is not None and parsed is not None
        if s.canonical_at is None:
            s.cf_skip = "not canonical"
            continue
        spans = render_spec(parsed).spans
        allowed = settings.ablation.families(sampler.families)
        options = {f: [r for r in applicable_edits(s.spec, f, levels) if r in spans]  # type: ignore[arg-type]
                   for f in allowed}
        options = {f: refs for f, refs in options.items() if refs}
        if not options:
            s.cf_skip = "no applicable edit"
            continue
        family = sampler.sample(options)
        ref = rng.choice(options[family])
        try:
            edited = validate_spec(apply_edit(s.spec, ref, levels).spec, roles, levels)
        except SpecError as exc:  # e.g. a vote agent losing its last parent
            s.cf_skip = f"edit invalid: {exc}"
            continue
        cost = estimate_rerun_tokens(s.spec, ref, edited, originals[i], executor)
        if budget is not None and used + cost > budget:
            s.cf_skip = "over budget"
            continue
        used += cost
        span = spans[ref]
        planned.append((i, family, ref, edited, cost, s.canonical_at + span.start, s.canonical_at + span.end))

    reruns = await asyncio.gather(*(_execute(executor, p[3], task, cache, seed) for p in planned))
    for (i, family, ref, edited, cost, start, end), (run, correct) in zip(planned, reruns, strict=True):
        s = samples[i]
        edited_reward = _score(run, correct, edited, settings.reward)
        delta = s.total_reward - edited_reward.total
        sampler.update(family, delta)
        s.cf = Counterfactual(family=family, field=ref, char_start=start, char_end=end, delta=delta,
                              edited_reward=edited_reward.total, spent_tokens=run.spent_tokens,
                              estimated_tokens=cost, cache_hits=run.cache_hits, calls=run.calls)
    return group

