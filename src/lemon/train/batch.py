"""Batch building: which tasks a step draws, whose workers' seeds, and rewards -> per-token advantages.

`build_batch` puts the group-relative advantage on every completion token and Δ on the tokens of each
counterfactual's field (or, in the pairwise form, on the token where the edit diverges), one scale for both.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lemon.seeds import stable_seed
from lemon.spec.render import Span
from lemon.train.config import CreditConfig
from lemon.train.credit import (
    CounterfactualTerm,
    FieldPair,
    advantage_scales,
    group_advantages,
    tied_cost_advantages,
)
from lemon.train.generation import Completion
from lemon.train.rollout import GroupResult, Sample
from lemon.train.token_spans import char_span_to_token_indices, edit_window


def group_worker_seed(seed: int, task_id: str, step: int, mode: str, bank_seed: int = 0) -> int:
    """The seed of a group's workers: per task (`task`: a team written again is a cache hit), the sample
    bank's (`bank`: evaluation's seed 0 of the item, whatever the run seed) or per visit."""
    if mode == "bank":
        return bank_seed
    if mode == "task":
        return stable_seed(seed, "worker", task_id)
    return stable_seed(seed, "worker", task_id, step)


def task_indices(step: int, n_tasks: int, per_step: int, seed: int) -> list[int]:
    """Tasks of `step` (1-based): consecutive slices of a seeded permutation, reshuffled every epoch."""
    out: list[int] = []
    start = (step - 1) * per_step
    for k in range(start, start + per_step):
        epoch, pos = divmod(k, n_tasks)
        order = list(range(n_tasks))
        random.Random(stable_seed(seed, "epoch", epoch)).shuffle(order)
        out.append(order[pos])
    return out


@dataclass
class StepBatch:
    """The sequences of one step with their per-token advantages."""

    prompts: list[list[int]] = field(default_factory=list)
    completions: list[list[int]] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    cf_terms: list[list[CounterfactualTerm]] = field(default_factory=list)
    cf_pairs: list[list[FieldPair]] = field(default_factory=list)  # credit.cf_form "pairwise"; [] = none

    def has_signal(self) -> bool:
        """False when every advantage and every counterfactual term is zero: a step would only add noise."""
        terms = [t for row in self.cf_terms for t in row] + [t for row in self.cf_pairs for t in row]
        return any(a != 0 for a in self.advantages) or any(t.delta != 0 and t.weight != 0 for t in terms)

    def pairs(self, rows: slice) -> list[list[FieldPair]]:
        """The pairwise terms of `rows` (empty lists when the batch has none)."""
        return self.cf_pairs[rows] if self.cf_pairs else [[] for _ in self.completions[rows]]


Alternative = Callable[[Completion, int, int, str], tuple[int, int] | None]


def _credit_terms(sample: Sample, comp: Completion, weight: float, alternative: Alternative | None
                  ) -> tuple[list[CounterfactualTerm], list[FieldPair]]:
    """One sample's counterfactual as a pairwise term when `alternative` finds where the edit diverges from
    the completion, else as the span term on the original field's tokens."""
    cf = sample.cf
    assert cf is not None
    if alternative is not None:
        start, end, text = edit_window(comp.text, cf.char_start, cf.char_end, cf.field.kind, cf.edited_value)
        alt = alternative(comp, start, end, text)
        if alt is not None:
            return [], [FieldPair(alt[0], alt[1], cf.delta, weight)]
    idx = char_span_to_token_indices(comp.offsets, Span(cf.char_start, cf.char_end))
    return ([CounterfactualTerm(idx, cf.delta, weight)] if idx else []), []


def build_batch(groups: Sequence[GroupResult], completions: Sequence[Sequence[Completion]],
                credit: CreditConfig, *, cf: bool = True, alternative: Alternative | None = None) -> StepBatch:
    """Group advantages on every token, plus Δ on the tokens of each counterfactual's field, on ONE scale.

    Both the group advantage and Δ are divided by the group's scale (`advantage_scales`; 1 by default), so
    a counterfactual that flips success weighs what a solved spec weighs against its group. A group whose
    samples all succeed alike takes `credit.tied_cost` standard units for its cost contrast instead, when set
    (`tied_cost_advantages`). With `credit.cf_form` "pairwise", `alternative` (the policy's) finds the token
    where the edit diverges.
    """
    pairwise = alternative if credit.cf_form == "pairwise" else None
    batch = StepBatch()
    scales = advantage_scales([g.rewards for g in groups], credit.advantage_scale, credit.advantage_floor)
    for group, comps, scale in zip(groups, completions, scales, strict=True):
        tied = tied_cost_advantages(group.rewards, [s.success for s in group.samples],
                                    [s.valid for s in group.samples], credit.tied_cost)
        adv = group_advantages(group.rewards, scale) if tied is None else tied
        for sample, comp, a in zip(group.samples, comps, adv, strict=True):
            terms: list[CounterfactualTerm] = []
            pairs: list[FieldPair] = []
            if cf and sample.cf is not None and credit.cf_weight > 0:
                terms, pairs = _credit_terms(sample, comp, credit.cf_weight / scale, pairwise)
            batch.prompts.append(comp.prompt_ids)
            batch.completions.append(comp.ids)
            batch.advantages.append(a)
            batch.cf_terms.append(terms)
            batch.cf_pairs.append(pairs)
    return batch
