"""What a step writes: its metrics row (`metrics.jsonl`) and its sampled specs (`samples.jsonl`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, TypedDict

from lemon.spec.render import render_spec
from lemon.train.generation import Completion
from lemon.train.rollout import GroupResult, Sample
from lemon.train.sampler import AdaptiveFamilySampler

#: One step's row of `metrics.jsonl`: numbers by name (and the step's task ids, the skip reasons' counts).
MetricsRow = dict[str, object]


class CounterfactualRecord(TypedDict):
    """A sample's counterfactual as `samples.jsonl` keeps it."""

    family: str
    field: dict[str, str | None]
    delta: float
    span: list[int]
    edited_value: str
    room: float
    edit: str


class SampleRow(TypedDict):
    """One sampled spec as `samples.jsonl` keeps it: the text, validity, reward and its counterfactual."""

    step: int
    task_id: str
    sample: int
    completion: str
    valid: bool
    error: str | None
    reward: float
    success: float
    tokens: int
    cf: CounterfactualRecord | None
    cf_skip: str | None


def _avg(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _cf_metrics(samples: Sequence[Sample], families: Sequence[str]) -> dict[str, Any]:
    cfs = [s.cf for s in samples if s.cf is not None]
    valid = [s for s in samples if s.valid]
    row: dict[str, Any] = {
        "cf_tokens": sum(c.spent_tokens for c in cfs),
        "cf_cache_hits": sum(c.cache_hits for c in cfs),
        "cf_count": len(cfs),
        "cf_edited_rate": len(cfs) / len(valid) if valid else 0.0,
        "cf_skipped": {k: sum(1 for s in samples if s.cf_skip == k) for k in
                       sorted({s.cf_skip for s in samples if s.cf_skip})},
    }
    for f in families:
        ds = [c.delta for c in cfs if c.family == f]
        row[f"cf_delta_mean/{f}"] = _avg(ds)
        row[f"cf_abs_delta_mean/{f}"] = _avg([abs(d) for d in ds])
        row[f"cf_n/{f}"] = len(ds)
    return row


def step_metrics(step: int, groups: Sequence[GroupResult], completions: Sequence[Sequence[Completion]],
                 sampler: AdaptiveFamilySampler | None, families: Sequence[str]) -> MetricsRow:
    """The per-step JSONL row: rewards and components, validity, tokens, cache, collapse monitor, CF stats."""
    samples = [s for g in groups for s in g.samples]
    rewards = [s.total_reward for s in samples]
    mean = _avg(rewards)
    valid = [s for s in samples if s.valid]
    cfs = [s.cf for s in samples if s.cf is not None]
    row: dict[str, Any] = {
        "step": step,
        "reward_mean": mean,
        "reward_std": math.sqrt(_avg([(r - mean) ** 2 for r in rewards])),
        "success_mean": _avg([s.reward.success for s in samples if s.reward]),
        "efficiency_mean": _avg([s.reward.efficiency for s in samples if s.reward]),
        "structure_mean": _avg([s.reward.structure for s in samples if s.reward]),
        "invalid_penalty_mean": _avg([s.reward.invalid for s in samples if s.reward]),
        "valid_rate": len(valid) / len(samples),
        "canonical_rate": _avg([1.0 if s.canonical_at is not None else 0.0 for s in valid]),
        "accuracy": _avg([s.success for s in samples]),
        "groups_with_contrast": sum(1 for g in groups if len(set(g.rewards)) > 1),
        # Collapse monitor: how many different teams the policy still writes.
        "distinct_teams": len({render_spec(s.spec).text for s in valid if s.spec is not None}),
        "worker_tokens": sum(s.spent_tokens for s in samples) + sum(c.spent_tokens for c in cfs),
        "rollout_tokens": sum(s.spent_tokens for s in samples),
        "spec_tokens_mean": _avg([float(s.total_tokens) for s in valid]),
        "node_cache_hits": sum(s.cache_hits for s in samples) + sum(c.cache_hits for c in cfs),
        "completion_len_mean": _avg([float(len(c.ids)) for cs in completions for c in cs]),
        "stopped_rate": _avg([1.0 if c.stopped else 0.0 for cs in completions for c in cs]),
    }
    row.update(_cf_metrics(samples, families))
    if sampler is not None:
        for f, p in (groups[0].sampler_probs or sampler.probabilities()).items():
            row[f"family_prob/{f}"] = p
    return row


def sample_rows(step: int, groups: Sequence[GroupResult]) -> list[SampleRow]:
    """What `samples.jsonl` keeps of every sampled spec: the text, validity, reward and its counterfactual."""
    rows: list[SampleRow] = []
    for g in groups:
        for k, s in enumerate(g.samples):
            cf = None if s.cf is None else CounterfactualRecord(
                family=s.cf.family, field=asdict(s.cf.field), delta=s.cf.delta, span=[s.cf.char_start, s.cf.char_end],
                edited_value=s.cf.edited_value, room=s.cf.room, edit=s.cf.words)
            rows.append(SampleRow(step=step, task_id=g.task_id, sample=k, completion=s.completion, valid=s.valid,
                                  error=s.error, reward=s.total_reward, success=s.success, tokens=s.total_tokens,
                                  cf=cf, cf_skip=s.cf_skip))
    return rows
