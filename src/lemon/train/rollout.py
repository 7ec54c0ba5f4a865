"""Rollouts of GRPO groups in three named phases: score, plan counterfactuals, run them.

No torch here: this is the part the trainer and `benchmarks/bench_train.py` share, so the measured token
cost of counterfactual credit is the cost of exactly the code that trains. For the groups of one step (one
task each, G sampled completions):

1. **score** (`score_group`, all groups concurrently): each completion is read strictly (`strict_spec`:
   parse + validate as written, no repair); an invalid one gets the invalid penalty, is not executed and
   gets no counterfactual. Ablation overrides (`Ablation`) rewrite the valid specs, then all of them run
   through ONE node cache per group, under `worker_samples` worker seeds each (the same seeds for every spec
   of the group), so an agent two specs share is computed once and the success term is the mean over seeds.
2. **plan** (`plan_counterfactuals`, sequentially in task order, so the shared adaptive sampler is drawn in
   a fixed order and `--resume` reproduces the run): valid specs are visited in a seeded order; for each, a
   family is drawn among those with an applicable field THAT REACHES THE OUTPUT (an edit of an agent the
   runtime prunes changes nothing but the edge cost, and would teach the sampler to avoid a family for the
   wrong reason), a field is drawn uniformly, and the re-run is planned unless its estimated cost would
   exceed the group's counterfactual budget (`credit.cf_budget`).
3. **run** (`run_counterfactuals`, concurrently): each edited spec re-executes through its group's node
   cache under the same seeds, so only the edited agent and its descendants are recomputed.
   Δ = r(original) - r(edited); the sampler is updated in plan order.

The credit lands on the character span of the edited field in the ORIGINAL completion: the canonical
rendering of the parsed spec must occur verbatim in the completion (it does whenever the policy wrote the
canonical format it is trained on); a valid spec written in another layout gets no counterfactual.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from lemon.errors import LemonError, SpecError
from lemon.llm.models import parameters_b
from lemon.orchestrator.policy_prompt import strict_spec
from lemon.runtime import Executor, NodeCache, RunResult
from lemon.runtime.executor import derive_seed, required_agents
from lemon.runtime.rerun import rerun_plan
from lemon.spec.edits import applicable_edits, describe_edit, draw_edit, field_value
from lemon.spec.edits import family as edit_family
from lemon.spec.model import Spec
from lemon.spec.render import FieldRef, RenderedSpec, render_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from lemon.train.config import RewardConfig
from lemon.train.reward import RewardBreakdown, compute_reward, invalid_reward
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
            agents = [a.model_copy(update={"role": "generalist"}) if roles[a.role].votes and
                      not a.depends_on else a for a in agents]
        return validate_spec(Spec(agents=tuple(agents), output=output), roles, levels)

    def families(self, families: Sequence[str]) -> tuple[str, ...]:
        """The counterfactual families that still mean something under this ablation: those whose field it does
        not fix (each family says which kind of field it edits: `spec.edits`), so a new family is covered too."""
        fixed = {kind for kind, on in (("duty", self.fixed_roles), ("capacity", self.fixed_capacity),
                                       ("edge", self.fixed_structure)) if on}
        return tuple(f for f in families if edit_family(f).kind not in fixed)

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
    edited_value: str = ""  # the field's value in the edited spec ("" for a reverted duty or a deleted edge)
    room: float = 1.0       # 1 - the share of the group's valid specs holding the same value in this field
    words: str = ""         # the edit in words (its family's `describe`)


@dataclass
class Sample:
    """One sampled completion of a group and everything measured about it."""

    completion: str
    valid: bool
    error: str | None = None
    spec: Spec | None = None              # the spec as executed (after ablation overrides)
    parsed: Spec | None = None            # the spec as written (its canonical text carries the spans)
    reward: RewardBreakdown | None = None
    correct: bool = False                 # every worker seed answered right
    success: float = 0.0                  # fraction of worker seeds that answered right
    status: str = "invalid"
    total_tokens: int = 0                  # intrinsic cost of the spec per execution (cache hits included)
    spent_tokens: int = 0                  # computed in this rollout (all worker seeds)
    cache_hits: int = 0
    calls: int = 0
    rendered: RenderedSpec | None = None   # the canonical text of `parsed` and its field spans, rendered once
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
    """What the rollout needs besides the executor: reward coefficients, credit switches, worker seeds."""

    reward: RewardConfig
    cf_enabled: bool = True
    cf_budget: float | None = 0.2
    ablation: Ablation = Ablation()
    worker_samples: int = 1
    # > 0: the worker samples are the group's ONE seed (a sample bank's) with the first `permute_draws` draws
    # of each role in other orders (`runtime.executor.sample_slot`), not fresh seeds: more runs of the item at
    # no worker call, so a team's success is nearly its expected success on the item, not one draw's luck.
    permute_draws: int = 0


@dataclass(frozen=True)
class PlannedEdit:
    """A counterfactual chosen in the plan phase, waiting to be executed."""

    sample: int                # index of the sample in its group
    family: str
    field: FieldRef
    edited: Spec
    estimated_tokens: int
    char_start: int            # the field's span in the ORIGINAL completion
    char_end: int
    room: float = 1.0          # `field_room` of the edited field in its group
    words: str = ""            # the edit in words


@dataclass
class GroupState:
    """What the phases of one group share: the task, its node cache, the worker seeds, the original runs."""

    task: TrainTask
    result: GroupResult
    cache: NodeCache
    draws: tuple[WorkerDraw, ...]
    runs: dict[int, list[RunResult]] = field(default_factory=dict)
    plans: list[PlannedEdit] = field(default_factory=list)


def n_edges(spec: Spec) -> int:
    return sum(len(a.depends_on) for a in spec.agents)


def worker_seeds(seed: int, samples: int) -> tuple[int, ...]:
    """The worker seeds of a group: `seed` itself first, so one sample reproduces the one-seed runs."""
    return (seed, *tuple(derive_seed(seed, f"worker-sample-{k}") for k in range(1, samples)))


@dataclass(frozen=True)
class WorkerDraw:
    """One execution of a group's specs: a worker seed and the order its banked draws are taken in."""

    seed: int
    order: tuple[int, ...] = ()


def draw_orders(seed: int, samples: int, width: int) -> tuple[tuple[int, ...], ...]:
    """`samples` orders of `width` draws: written order first (so one sample is the plain bank run), then
    seeded shuffles, the same for every spec of a group (common random numbers)."""
    out = [tuple(range(width))]
    for k in range(1, samples):
        order = list(range(width))
        random.Random(derive_seed(seed, f"draw-order-{k}")).shuffle(order)
        out.append(tuple(order))
    return tuple(out)


def worker_draws(seed: int, settings: RolloutSettings) -> tuple[WorkerDraw, ...]:
    """The executions of a group: fresh seeds, or one seed in `permute_draws`-wide orders."""
    if settings.permute_draws:
        return tuple(WorkerDraw(seed, order)
                     for order in draw_orders(seed, settings.worker_samples, settings.permute_draws))
    return tuple(WorkerDraw(s) for s in worker_seeds(seed, settings.worker_samples))


def _spans_in_completion(rendered: RenderedSpec, completion: str) -> int | None:
    """Offset of the canonical text inside the completion, or None if it was written otherwise."""
    idx = completion.find(rendered.text)
    return idx if idx >= 0 else None


def live_fields(spec: Spec, refs: Sequence[FieldRef]) -> list[FieldRef]:
    """The fields whose agent reaches the output (for an edge, its child; the parent then does too)."""
    live = required_agents(spec)
    return [r for r in refs if r.agent in live]


async def _execute(executor: Executor, spec: Spec, state: GroupState) -> tuple[list[RunResult], list[bool]]:
    """Run `spec` once per worker seed of the group (through its node cache); grade every run."""
    task = state.task
    runs = await asyncio.gather(*(executor.run(spec, task.prompt, seed=d.seed, vote_key=task.vote_key,
                                               task_id=task.id, node_cache=state.cache, draw_order=d.order,
                                               max_tokens=task.reply_tokens)
                                  for d in state.draws))
    graded = await asyncio.gather(*(is_correct(task, r.answer) if r.status == "ok" else _false() for r in runs))
    return list(runs), list(graded)


async def _false() -> bool:
    return False


def _score(runs: Sequence[RunResult], correct: Sequence[bool], spec: Spec, cfg: RewardConfig) -> RewardBreakdown:
    success = sum(correct) / len(correct)
    tokens = sum(run_cost(r, cfg) for r in runs) / len(runs) + spec_cost(spec, cfg)
    return compute_reward(cfg, success=success, tokens=tokens, n_agents=len(spec.agents), n_edges=n_edges(spec))


def run_cost(run: RunResult, cfg: RewardConfig) -> float:
    """One execution's worker cost in the reward's unit: tokens, or tokens x model size (billions)."""
    if cfg.cost == "worker_tokens":
        return float(run.total_tokens)
    return sum((t["prompt"] + t["completion"]) * _size(str(t.get("model") or "")) for t in run.tokens_by_agent.values())


def spec_cost(spec: Spec, cfg: RewardConfig) -> float:
    """The orchestrator's cost of writing `spec` (0 unless `spec_chars_per_token` is set)."""
    if cfg.spec_chars_per_token is None:
        return 0.0
    tokens = len(render_spec(spec).text) / cfg.spec_chars_per_token
    return tokens * (cfg.orchestrator_params_b if cfg.cost == "param_tokens" else 1.0)


def _size(model: str) -> float:
    """Billions of parameters read from the model's name; a vote (no model) costs nothing."""
    size = parameters_b(model)
    if math.isnan(size):
        if model in ("vote", ""):
            return 0.0
        raise LemonError(f"reward cost param_tokens: the size of model {model!r} cannot be read from its name; "
                         "use reward.cost worker_tokens")
    return size


def _read_completions(completions: Sequence[str], roles: RoleLibrary, levels: Sequence[str],
                      settings: RolloutSettings) -> list[Sample]:
    samples = []
    for text in completions:
        res = strict_spec(text, roles, levels)
        if res.spec is None or res.parsed is None:
            samples.append(Sample(completion=text, valid=False, error=res.error,
                                  reward=invalid_reward(settings.reward)))
            continue
        try:
            spec = settings.ablation.apply(res.spec, roles, levels)
        except SpecError as exc:  # cannot happen for a valid spec; kept loud rather than silent
            raise SpecError(f"ablation produced an invalid spec: {exc}") from None
        rendered = render_spec(res.parsed)
        samples.append(Sample(completion=text, valid=True, spec=spec, parsed=res.parsed, rendered=rendered,
                              canonical_at=_spans_in_completion(rendered, text)))
    return samples


async def score_group(executor: Executor, task: TrainTask, completions: Sequence[str], *,
                      roles: RoleLibrary, settings: RolloutSettings, seed: int = 0) -> GroupState:
    """Phase 1: read, execute and reward every completion of one group."""
    samples = _read_completions(completions, roles, executor.pool.level_names, settings)
    state = GroupState(task=task, result=GroupResult(task_id=task.id, samples=samples), cache=NodeCache(),
                       draws=worker_draws(seed, settings))
    valid_idx = [i for i, s in enumerate(samples) if s.valid]
    executed = await asyncio.gather(*(_execute(executor, samples[i].spec, state)  # type: ignore[arg-type]
                                      for i in valid_idx))
    for i, (runs, correct) in zip(valid_idx, executed, strict=True):
        s = samples[i]
        assert s.spec is not None
        state.runs[i] = runs
        s.success, s.correct = sum(correct) / len(correct), all(correct)
        s.status = runs[0].status if all(r.status == runs[0].status for r in runs) else "mixed"
        s.total_tokens = round(sum(r.total_tokens for r in runs) / len(runs))
        s.spent_tokens = sum(r.spent_tokens for r in runs)
        s.cache_hits, s.calls = sum(r.cache_hits for r in runs), sum(r.calls for r in runs)
        s.reward = _score(runs, correct, s.spec, settings.reward)
    return state


def _edit_options(s: Sample, allowed: Sequence[str], levels: Sequence[str],
                  roles: RoleLibrary) -> dict[str, list[FieldRef]]:
    """Per family, the fields of the executed spec that have a span in the completion, reach the output and
    change a request: the capacity of an agent that calls no model (a majority vote) changes nothing, and
    its Δ of exactly 0 would teach the family sampler that capacity edits do not matter."""
    assert s.spec is not None and s.rendered is not None
    spans = s.rendered.spans
    spec = s.spec
    inert = {a.name for a in spec.agents if not roles[a.role].calls_model}
    options = {f: [r for r in live_fields(spec, applicable_edits(spec, f, levels))
                   if r in spans and not (edit_family(f).model_only and r.agent in inert)] for f in allowed}
    return {f: refs for f, refs in options.items() if refs}


def field_room(spec: Spec, ref: FieldRef, group: Sequence[Spec]) -> float:
    """1 - the share of `group` (the valid specs of the group, `spec` among them) that hold `spec`'s value
    in `ref`: a Monte-Carlo estimate of how far the policy still is from choosing it with certainty."""
    value = field_value(spec, ref)
    return 1.0 - sum(field_value(other, ref) == value for other in group) / len(group) if group else 1.0


def plan_counterfactuals(state: GroupState, executor: Executor, *, roles: RoleLibrary,
                         settings: RolloutSettings, sampler: AdaptiveFamilySampler,
                         rng: random.Random) -> list[PlannedEdit]:
    """Phase 2: choose at most one edit per valid spec, within the group's counterfactual budget."""
    levels = executor.pool.level_names
    samples = state.result.samples
    valid_idx = [i for i, s in enumerate(samples) if s.valid]
    state.result.sampler_probs = sampler.probabilities()
    budget = None if settings.cf_budget is None else settings.cf_budget * sum(
        samples[i].total_tokens * len(state.draws) for i in valid_idx)
    state.result.cf_budget_tokens = budget
    used = 0
    group = [sp for i in valid_idx if (sp := samples[i].spec) is not None]
    order = list(valid_idx)
    rng.shuffle(order)
    for i in order:
        s = samples[i]
        assert s.spec is not None and s.rendered is not None
        if s.canonical_at is None:
            s.cf_skip = "not canonical"
            continue
        options = _edit_options(s, settings.ablation.families(sampler.families), levels, roles)
        if not options:
            s.cf_skip = "no applicable live edit"
            continue
        family = sampler.sample(options)
        ref = rng.choice(options[family])
        try:
            edit = draw_edit(s.spec, family, ref, levels, rng)  # `level` and `stop` draw their variant
            edited = validate_spec(edit.spec, roles, levels)
        except SpecError as exc:  # e.g. a vote agent losing its last parent
            s.cf_skip = f"edit invalid: {exc}"
            continue
        cost = sum(rerun_plan(s.spec, ref, edited, executor.pool, executor.roles, run.tokens_by_agent)[1]
                   for run in state.runs[i])
        if budget is not None and used + cost > budget:
            s.cf_skip = "over budget"
            continue
        used += cost
        span = s.rendered.spans[ref]  # the field in the completion as written, not in the executed spec
        state.plans.append(PlannedEdit(i, family, ref, edited, cost, s.canonical_at + span.start,
                                       s.canonical_at + span.end, field_room(s.spec, ref, group),
                                       describe_edit(edit)))
    return state.plans


async def run_counterfactuals(state: GroupState, executor: Executor,
                              settings: RolloutSettings) -> list[tuple[PlannedEdit, float]]:
    """Phase 3: execute the planned edits through the group's node cache; record Δ on each sample."""
    executed = await asyncio.gather(*(_execute(executor, p.edited, state) for p in state.plans))
    deltas = []
    for plan, (runs, correct) in zip(state.plans, executed, strict=True):
        s = state.result.samples[plan.sample]
        edited_reward = _score(runs, correct, plan.edited, settings.reward)
        delta = s.total_reward - edited_reward.total
        s.cf = Counterfactual(family=plan.family, field=plan.field, char_start=plan.char_start,
                              char_end=plan.char_end, delta=delta, edited_reward=edited_reward.total,
                              spent_tokens=sum(r.spent_tokens for r in runs), estimated_tokens=plan.estimated_tokens,
                              cache_hits=sum(r.cache_hits for r in runs), calls=sum(r.calls for r in runs),
                              edited_value=field_value(plan.edited, plan.field) or "", room=plan.room,
                              words=plan.words)
        deltas.append((plan, delta))
    return deltas


async def rollout_groups(executor: Executor, tasks: Sequence[TrainTask],
                         completions: Sequence[Sequence[str]], *, roles: RoleLibrary,
                         settings: RolloutSettings, sampler: AdaptiveFamilySampler | None,
                         rng: random.Random, seeds: Sequence[int]) -> list[GroupResult]:
    """The three phases over the groups of one step; plans and sampler updates in task order."""
    states = list(await asyncio.gather(*(
        score_group(executor, t, cs, roles=roles, settings=settings, seed=sd)
        for t, cs, sd in zip(tasks, completions, seeds, strict=True))))
    if settings.cf_enabled and sampler is not None:
        for state in states:
            plan_counterfactuals(state, executor, roles=roles, settings=settings, sampler=sampler,
                                 rng=random.Random(rng.random()))
        done = await asyncio.gather(*(run_counterfactuals(st, executor, settings) for st in states))
        for deltas in done:
            for plan, delta in deltas:
                sampler.update(plan.family, delta, plan.room)
    else:
        for st in states:
            for smp in st.result.samples:
                smp.cf_skip = "disabled" if smp.valid else None
    return [st.result for st in states]


async def rollout_group(executor: Executor, task: TrainTask, completions: Sequence[str], *,
                        roles: RoleLibrary, settings: RolloutSettings,
                        sampler: AdaptiveFamilySampler | None, rng: random.Random,
                        seed: int = 0) -> GroupResult:
    """One group through the three phases (what `benchmarks/bench_train.py` measures)."""
    groups = await rollout_groups(executor, [task], [completions], roles=roles, settings=settings,
                                  sampler=sampler, rng=rng, seeds=[seed])
    return groups[0]
