"""`lemon train`: orchestration-level GRPO with localized counterfactual credit, as a compact trainer.

`Trainer.step` is the whole algorithm in four named phases:

1. **generate**: pick `tasks_per_step` training tasks (a seeded permutation per epoch) and sample a group of
   G specs per task from the policy (the sampled token ids are kept);
2. **rollout**: `rollout.rollout_groups` scores every group (execution through one node cache per group,
   workers sampled as in evaluation), plans counterfactual edits in task order and runs them;
3. **credit**: `build_batch` turns rewards into group-relative advantages on every completion token and
   Δ on the tokens of each edited field, both divided by ONE scale (`credit.advantage_scales`);
4. **update**: `optim.epochs` AdamW steps (1 by default; later epochs use PPO's clipped ratio to the
   sampling policy) on `policy_gradient_loss + counterfactual_loss` (+ k3 KL to the reference), skipped
   when the batch carries no signal. Each group's prompt is scored once (`optim.share_prompt`).

Under `accelerate launch` each process runs the four phases on its share of the step's tasks; the loss is
a token mean over the global batch and the groups are gathered for the metrics (`lemon.train.distributed`).

Every step appends a metrics row (rewards, validity, accuracy, the seconds of each phase, the relative weight
change, KL, distinct teams and the sampled-token entropy) and the sampled specs to the run directory.

Why not TRL's GRPOTrainer: our reward needs the sampled ids and character offsets of every completion to
place the counterfactual term, asynchronous multi-agent execution per group, and adaptive-sampler state in
checkpoints; in TRL those live in private methods (`_generate_and_score_completions`, `_compute_loss`) that
change between releases. Per-step randomness (sampling, counterfactual choices, task order) is derived from
(seed, step), so a resumed run draws what the uninterrupted run would have; no global random state is read.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from lemon.errors import ConfigError, LemonError
from lemon.llm.serve import workers_for
from lemon.orchestrator.policy_prompt import policy_messages
from lemon.runtime import Executor
from lemon.seeds import stable_seed
from lemon.spec.render import Span, render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.config import CreditConfig, TrainConfig, load_train_config
from lemon.train.credit import (
    CounterfactualTerm,
    FieldPair,
    advantage_scales,
    counterfactual_advantages,
    counterfactual_loss,
    group_advantages,
    k3_kl,
    pairwise_field_loss,
    policy_gradient_loss,
)
from lemon.train.distributed import Distributed, check_shares, open_distributed, wants_cuda
from lemon.train.generation import Completion, score_completions
from lemon.train.policy_handle import HFPolicy, PolicyHandle, Reference
from lemon.train.rollout import Ablation, GroupResult, RolloutSettings, rollout_groups
from lemon.train.run_dir import RunDir
from lemon.train.sampler import AdaptiveFamilySampler
from lemon.train.tasks import TrainTask, load_train_tasks, split_record
from lemon.train.token_spans import char_span_to_token_indices, edit_window

log = logging.getLogger(__name__)

__all__ = ["StepBatch", "TrainSettings", "Trainer", "build_batch", "policy_update", "stable_seed", "train"]


@dataclass(frozen=True)
class TrainSettings:
    """Everything a `lemon train` run is configured with (besides the config file's coefficients)."""

    run_dir: Path
    benchmark: str = "gsm8k"
    pool: str = "tiny"
    policy: str | None = None            # HF directory or hub id; None = the converted SmolLM2 default
    steps: int = 100
    limit_tasks: int | None = None        # first N items of the train split
    data_dir: str | None = None
    config_path: str | None = None
    save_every: int = 50
    keep_checkpoints: int = 2
    seed: int = 0
    resume: bool = False
    cf: bool = True
    families: tuple[str, ...] | None = None
    confidence_discount: bool | None = None
    cf_form: str | None = None
    ablation: Ablation = field(default_factory=Ablation)
    lora: bool = False
    cache: bool = True
    threads: int | None = 2
    # Overrides of config values (None = keep the config file's).
    group_size: int | None = None
    max_new_tokens: int | None = None
    kl_beta: float | None = None
    lr: float | None = None
    tasks_per_step: int | None = None
    worker_samples: int | None = None
    # Keep only tasks one CoT agent solves under some but not all of this many worker seeds (curriculum.py).
    uncertain_samples: int | None = None
    epochs: int | None = None
    precision: str | None = None
    gradient_checkpointing: bool | None = None
    # Worker models in their own server processes (`lemon.llm.serve`); None: whenever torch trains on a GPU,
    # where a CUDA llama.cpp in the trainer's process crashes it.
    serve_workers: bool | None = None


def effective_config(s: TrainSettings) -> TrainConfig:
    """The config file with the command-line overrides applied (validated again)."""
    cfg = load_train_config(s.config_path)
    data = cfg.model_dump()
    if s.group_size is not None:
        data["group"]["group_size"] = s.group_size
    if s.max_new_tokens is not None:
        data["rollout"]["max_new_tokens"] = s.max_new_tokens
    if s.tasks_per_step is not None:
        data["rollout"]["tasks_per_step"] = s.tasks_per_step
    if s.kl_beta is not None:
        data["credit"]["kl_beta"] = s.kl_beta
    if s.lr is not None:
        data["optim"]["lr"] = s.lr
    if s.families is not None:
        data["sampler"]["families"] = tuple(s.families)
    if s.confidence_discount is not None:
        data["sampler"]["confidence_discount"] = s.confidence_discount
    if s.cf_form is not None:
        data["credit"]["cf_form"] = s.cf_form
    if s.worker_samples is not None:
        data["workers"]["samples"] = s.worker_samples
    for key in ("epochs", "precision", "gradient_checkpointing"):
        if getattr(s, key) is not None:
            data["optim"][key] = getattr(s, key)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:  # one line naming the field (the text's last line is only a docs link)
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"invalid training override {loc}={err.get('input')!r}: {err['msg']}") from None


def group_worker_seed(seed: int, task_id: str, step: int, mode: str) -> int:
    """The seed of a group's workers: per task (`task`: a team written again is a cache hit) or per visit."""
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




# ---- credit: rewards -> per-token advantages ---------------------------------------------------------


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


def _credit_terms(sample: Any, comp: Completion, weight: float, alternative: Alternative | None
                  ) -> tuple[list[CounterfactualTerm], list[FieldPair]]:
    """One sample's counterfactual as a pairwise term when `alternative` finds where the edit diverges from
    the completion, else as the span term on the original field's tokens."""
    cf = sample.cf
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
    a counterfactual that flips success weighs what a solved spec weighs against its group. With
    `credit.cf_form` "pairwise", `alternative` (the policy's) finds the token where the edit diverges.
    """
    pairwise = alternative if credit.cf_form == "pairwise" else None
    batch = StepBatch()
    scales = advantage_scales([g.rewards for g in groups], credit.advantage_scale, credit.advantage_floor)
    for group, comps, scale in zip(groups, completions, scales, strict=True):
        adv = group_advantages(group.rewards, scale)
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


# ---- update ------------------------------------------------------------------------------------------


def _trainable(model: Any) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


# Elements of the trainable weights the weight-change monitor copies before a step (4 MiB in fp32).
WATCHED_ELEMENTS = 1 << 20


def watched_weights(params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Every k-th element of each trainable tensor (this process's shard under FSDP), flattened views, with
    k chosen so that at most ~`WATCHED_ELEMENTS` are watched: all of them for LoRA or a small policy.

    Why not all: `policy_update` copied every trainable weight each step to measure how far the policy
    moved, which doubles the weights' memory on a full fine-tune (a 7B policy: 28 GB more in fp32).
    """
    local = [p.to_local() if hasattr(p, "to_local") else p for p in params]
    stride = max(1, -(-sum(p.numel() for p in local) // WATCHED_ELEMENTS))
    return [p.detach().reshape(-1)[::stride] for p in local]


def _relative_change(before: Sequence[torch.Tensor], after: Sequence[torch.Tensor], dist: Distributed) -> float:
    """||after - before|| / ||before|| over the watched weights (the 'did the policy move' number), summed
    over the shards of every process under FSDP."""
    # Per-tensor fp32 norms (one pass each), squared and summed in Python floats: a fp64 copy of every
    # tensor cost ~2.5 s per step on SmolLM2 on 2 cores, for a monitor that needs 3 digits.
    num2 = sum(float(torch.linalg.vector_norm(a - b)) ** 2 for a, b in zip(after, before, strict=True))
    den2 = sum(float(torch.linalg.vector_norm(b)) ** 2 for b in before)
    if dist.sharded:
        num2, den2 = dist.all_sum([num2, den2])
    return math.sqrt(num2 / den2) if den2 > 0 else math.sqrt(num2)


@dataclass
class _Memo:
    """Per micro-batch tensors kept across epochs: the sampling policy's log-probs and the reference's."""

    old: dict[int, torch.Tensor] = field(default_factory=dict)
    ref: dict[int, torch.Tensor] = field(default_factory=dict)


def _alt_rows(completions: Sequence[Sequence[int]], pairs: Sequence[Sequence[FieldPair]]) -> list[list[int]]:
    """Per row, the completion with each pair's alternative token at its position (what `alt_ids` scores)."""
    rows = [list(c) for c in completions]
    for row, row_pairs in zip(rows, pairs, strict=True):
        for pair in row_pairs:
            row[pair.position] = pair.alt_id
    return rows


def _accumulate(model: Any, batch: StepBatch, cfg: TrainConfig, pad_id: int, reference: Reference | None,
                stats: dict[str, float] | None, n_tokens: float, dist: Distributed, memo: _Memo,
                first: bool) -> None:
    """Forward + backward over micro-batches; the loss is one token mean over the whole (global) batch.

    `n_tokens` counts the completion tokens of every process; the gradient all-reduce runs on the last
    micro-batch only. Epochs after the first score PPO's clipped ratio against the first epoch's log-probs.
    """
    temp = cfg.rollout.temperature
    share: bool = can_share_prompt(dist.unwrap(model), cfg)
    slices = micro_batches(batch.prompts, cfg.optim.micro_batch, by_prompt=share)
    dist.same_count(len(slices), "micro-batches")
    for k, sl in enumerate(slices):
        b = sl.start
        with dist.no_sync(model, sync=k == len(slices) - 1):
            pairs = batch.pairs(sl)
            alt = _alt_rows(batch.completions[sl], pairs) if any(pairs) else None
            lp, mask, _ = score_completions(model, batch.prompts[sl], batch.completions[sl], pad_id, temp, share, alt)
            lp, lp_pair = (lp, None) if alt is None else (lp[..., 0], lp)
            t = lp.shape[1]
            adv = torch.tensor(batch.advantages[sl], dtype=lp.dtype, device=lp.device)[:, None].expand(-1, t)
            cf = torch.stack([counterfactual_advantages(t, terms).to(lp.device, lp.dtype)
                              for terms in batch.cf_terms[sl]])
            if reference is not None and b not in memo.ref:
                memo.ref[b] = reference.logprobs(batch.prompts[sl], batch.completions[sl], pad_id, temp, share)
            ref_lp = memo.ref.get(b)
            if first and cfg.optim.epochs > 1:
                memo.old[b] = lp.detach()
            # This micro-batch's weight in the token mean over the whole batch (not `share`: reusing that
            # name turned prompt sharing back on for the next micro-batch under gradient checkpointing).
            weight = mask.sum().item() / n_tokens
            pg = policy_gradient_loss(lp, adv, mask, old_logprobs=None if first else memo.old[b],
                                      clip_eps=cfg.credit.clip_eps, ref_logprobs=ref_lp,
                                      kl_beta=cfg.credit.kl_beta) * weight
            cfl = counterfactual_loss(lp, cf, mask) * weight
            if lp_pair is not None:
                cfl = cfl + pairwise_field_loss(lp_pair, pairs) / n_tokens
            dist.backward((pg + cfl) * dist.loss_scale)
        if stats is not None:
            on_span = (cf != 0) & mask.bool()
            stats["cf_span_tokens"] += float(on_span.sum())
            stats["cf_span_p"] += float(torch.exp(lp.detach())[on_span].sum())  # a sum here, a mean at the end
            stats["loss_pg"] += float(pg.detach())
            stats["loss_cf"] += float(cfl.detach())
            stats["entropy"] += float(-(lp.detach() * mask).sum()) / n_tokens
            if ref_lp is not None:
                stats["kl"] += float((k3_kl(lp.detach(), ref_lp) * mask).sum()) / n_tokens


def can_share_prompt(model: Any, cfg: TrainConfig) -> bool:
    """Score a group's prompt once (`generation.shared_prompt_logprobs`): an HF model (a key/value cache),
    and no gradient checkpointing, under which transformers drops the cache."""
    return cfg.optim.share_prompt and not cfg.optim.gradient_checkpointing and hasattr(model, "config")


def micro_batches(prompts: Sequence[Sequence[int]], size: int, *, by_prompt: bool) -> list[slice]:
    """Consecutive rows, at most `size` each; with `by_prompt` also cut where the prompt changes, so a
    micro-batch is (part of) one group and its prompt runs once."""
    out: list[slice] = []
    start = 0
    for i in range(1, len(prompts) + 1):
        if i == len(prompts) or i - start == size or (by_prompt and list(prompts[i]) != list(prompts[start])):
            out.append(slice(start, i))
            start = i
    return out


@contextlib.contextmanager
def scoring_mode(model: Any, checkpointing: bool) -> Iterator[None]:
    """The mode the loss is computed in: no dropout, like generation (review item 6).

    Plain eval mode, except with gradient checkpointing, which transformers applies only in training mode:
    then the model is in training mode with every dropout module switched off.
    """
    was_training = model.training
    try:
        if checkpointing:
            model.train()
            for m in model.modules():
                if isinstance(m, torch.nn.Dropout):
                    m.eval()
        else:
            model.eval()
        yield
    finally:
        model.train(was_training)


def policy_update(model: Any, batch: StepBatch, optimizer: Any, cfg: TrainConfig, pad_id: int,
                  reference: Reference | None = None, dist: Distributed | None = None) -> dict[str, float]:
    """`optim.epochs` optimiser steps on the batch; returns loss parts, KL, grad norm and the weight change.

    The forward runs without dropout (LoRA dropout included): the completions were sampled without it, and
    the loss must score the distribution that sampled them. A batch without signal (every advantage and Δ
    zero, on every process) takes no step at all, even with a KL term: Adam's momentum would otherwise keep
    moving the policy on batches that say nothing (review item 7). Loss, KL and entropy are those of the
    first epoch (the sampling policy), summed over processes.
    """
    dist = dist or Distributed()
    stats = {"loss_pg": 0.0, "loss_cf": 0.0, "kl": 0.0, "entropy": 0.0, "grad_norm": 0.0, "updated": 0.0,
             "weight_change": 0.0, "cf_span_p": 0.0, "cf_span_tokens": 0.0}
    signal, n_tokens = dist.all_sum([float(batch.has_signal()), float(sum(len(c) for c in batch.completions))])
    if signal == 0 or n_tokens == 0:
        del stats["cf_span_p"]
        return stats
    params = _trainable(model)
    before = [w.clone() for w in watched_weights(params)]
    memo = _Memo()
    with scoring_mode(model, cfg.optim.gradient_checkpointing):
        for epoch in range(cfg.optim.epochs):
            optimizer.zero_grad(set_to_none=True)
            _accumulate(model, batch, cfg, pad_id, reference if cfg.credit.kl_beta > 0 else None,
                        stats if epoch == 0 else None, n_tokens, dist, memo, first=epoch == 0)
            norm = dist.clip_grad_norm(params, cfg.optim.max_grad_norm)
            if epoch == 0:
                stats["grad_norm"] = norm
            optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    keys = ("loss_pg", "loss_cf", "kl", "entropy", "cf_span_p", "cf_span_tokens")
    for key, total in zip(keys, dist.all_sum([stats[k] for k in keys]), strict=True):
        stats[key] = total
    # Mean probability of the credited tokens: the counterfactual gradient on a token is A * (onehot - p),
    # so a span the policy already writes with p ~ 1 cannot move, whatever its Δ (issue 10's CPU run).
    if stats["cf_span_tokens"]:
        stats["cf_span_p"] /= stats["cf_span_tokens"]
    else:  # no span credit this step: no probability to report (a 0 would read as "credit had all the room")
        del stats["cf_span_p"]
    stats["weight_change"] = _relative_change(before, watched_weights(params), dist)
    stats["updated"] = 1.0
    return stats


# ---- metrics -----------------------------------------------------------------------------------------


def _avg(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _cf_metrics(samples: Sequence[Any], families: Sequence[str]) -> dict[str, Any]:
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
                 sampler: AdaptiveFamilySampler | None, families: Sequence[str]) -> dict[str, Any]:
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


def sample_rows(step: int, groups: Sequence[GroupResult]) -> list[dict[str, Any]]:
    """What `samples.jsonl` keeps of every sampled spec: the text, validity, reward and its counterfactual."""
    rows = []
    for g in groups:
        for k, s in enumerate(g.samples):
            cf = None if s.cf is None else {"family": s.cf.family, "field": asdict(s.cf.field),
                                            "delta": s.cf.delta, "span": [s.cf.char_start, s.cf.char_end],
                                            "edited_value": s.cf.edited_value, "room": s.cf.room,
                                            "edit": s.cf.words}
            rows.append({"step": step, "task_id": g.task_id, "sample": k, "completion": s.completion,
                         "valid": s.valid, "error": s.error, "reward": s.total_reward, "success": s.success,
                         "tokens": s.total_tokens, "cf": cf, "cf_skip": s.cf_skip})
    return rows


# ---- the trainer -------------------------------------------------------------------------------------

INVALID_HINT = ("every sampled spec was invalid (reward = invalid penalty, no gradient): the policy does not "
                "write specs yet; start from an SFT policy (lemon sft --out runs/sft, then --policy "
                "runs/sft/model)")
ProgressHook = Callable[[int, dict[str, Any]], None]


@dataclass
class Trainer:
    """The state of one GRPO run; `step(n)` runs the four phases of step n (see the module docstring).

    In a data-parallel run (`dist`, see `lemon.train.distributed`) each process generates and rolls out its
    share of the step's tasks and updates on it; `update_model` is the engine-wrapped policy the update runs
    (None: `policy.model`). The groups of all processes are then gathered, in task order, for the metrics and
    the adaptive sampler, so every process keeps the same sampler state and only the main one writes.
    """

    settings: TrainSettings
    cfg: TrainConfig
    policy: PolicyHandle
    executor: Executor
    roles: RoleLibrary
    tasks: Sequence[TrainTask]
    optimizer: Any
    sampler: AdaptiveFamilySampler
    run: RunDir | None = None
    reference: Reference | None = None
    dist: Distributed = field(default_factory=Distributed)
    update_model: Any = None

    def _seed(self, name: str, step: int) -> int:
        """(seed, name, step) on one process, the same with the rank added on several (each draws its own)."""
        if self.dist.world == 1:
            return stable_seed(self.settings.seed, name, step)
        return stable_seed(self.settings.seed, name, step, "rank", self.dist.rank)

    def generate(self, step: int, chosen: Sequence[TrainTask]) -> list[list[Completion]]:
        g = self.cfg.group.group_size
        levels = self.executor.pool.level_names
        prompts = [self.policy.prompt_ids(policy_messages(t.prompt, self.roles, levels)) for t in chosen]
        comps = self.policy.sample([p for p in prompts for _ in range(g)],
                                   max_new_tokens=self.cfg.rollout.max_new_tokens,
                                   temperature=self.cfg.rollout.temperature, seed=self._seed("generate", step))
        return [comps[k * g:(k + 1) * g] for k in range(len(chosen))]

    def _step_sampler(self, step: int) -> AdaptiveFamilySampler:
        """The sampler the rollout draws from: the run's own on one process; on several, a copy with a
        per-(step, rank) stream, whose history `_sync_sampler` then rebuilds identically everywhere."""
        if self.dist.world == 1:
            return self.sampler
        mine = copy.deepcopy(self.sampler)
        mine.reseed(self._seed("sampler", step))
        return mine

    def _sync_sampler(self, groups: Sequence[GroupResult]) -> None:
        if self.dist.world > 1 and self.settings.cf:
            for g in groups:
                for smp in g.samples:
                    if smp.cf is not None:
                        self.sampler.update(smp.cf.family, smp.cf.delta, smp.cf.room)

    async def rollout(self, step: int, chosen: Sequence[TrainTask],
                      grouped: Sequence[Sequence[Completion]]) -> list[GroupResult]:
        s = self.settings
        settings = RolloutSettings(reward=self.cfg.reward, cf_enabled=s.cf, cf_budget=self.cfg.credit.cf_budget,
                                   ablation=s.ablation, worker_samples=self.cfg.workers.samples)
        return await rollout_groups(
            self.executor, chosen, [[c.text for c in cs] for cs in grouped], roles=self.roles,
            settings=settings, sampler=self._step_sampler(step) if s.cf else None,
            rng=random.Random(self._seed("rollout", step)),
            seeds=[group_worker_seed(s.seed, t.id, step, self.cfg.workers.seeds) for t in chosen])

    def update(self, batch: StepBatch) -> dict[str, float]:
        model = self.policy.model if self.update_model is None else self.update_model
        return policy_update(model, batch, self.optimizer, self.cfg, self.policy.pad_id, self.reference, self.dist)

    async def step(self, step: int) -> dict[str, Any]:
        s, cfg = self.settings, self.cfg
        t0 = time.perf_counter()
        chosen = [self.tasks[i] for i in task_indices(step, len(self.tasks), cfg.rollout.tasks_per_step, s.seed)]
        mine = self.dist.shard(chosen)
        grouped = self.generate(step, mine)
        t1 = time.perf_counter()
        groups = await self.rollout(step, mine, grouped)
        t2 = time.perf_counter()
        upd = self.update(build_batch(groups, grouped, cfg.credit, cf=s.cf, alternative=self.policy.alternative))
        t3 = time.perf_counter()
        if self.dist.world > 1:  # every process's groups, in task order
            groups, grouped = self.dist.gather(groups), self.dist.gather(grouped)
            self._sync_sampler(groups)
        row = step_metrics(step, groups, grouped, self.sampler if s.cf else None, cfg.sampler.families)
        row.update(upd)
        row.update({"task_ids": [t.id for t in chosen], "gen_s": t1 - t0, "exec_s": t2 - t1,
                    "update_s": t3 - t2, "step_s": t3 - t0, "processes": self.dist.world})
        if row["valid_rate"] == 0.0:
            log.warning("step %d: %s", step, INVALID_HINT)
        if self.run is not None and self.dist.is_main:
            self.run.append(self.run.metrics_path, [row])
            self.run.append(self.run.samples_path, sample_rows(step, groups))
        return row

    @property
    def engine_model(self) -> Any:
        """The module the update runs (DDP/FSDP-wrapped under accelerate), whose shards a checkpoint gathers."""
        return self.policy.model if self.update_model is None else self.update_model

    def save(self, step: int) -> Path:
        """Write step N's checkpoint. EVERY process calls it: under FSDP the weights and the optimizer state
        are gathered from all shards (collectives), then the main process writes; all return its path."""
        weights = self.dist.model_state(self.engine_model)
        optim = self.dist.optimizer_state(self.engine_model, self.optimizer)

        def write() -> Path:
            assert self.run is not None
            tmp = self.run.new_checkpoint(step)
            if weights is None:
                self.policy.save(tmp)
            else:
                self.policy.save(tmp, weights)
            torch.save(optim, tmp / "optimizer.pt")
            (tmp / "trainer_state.json").write_text(json.dumps({"step": step, "sampler": self.sampler.state_dict()}),
                                                    encoding="utf-8")
            return self.run.commit_checkpoint(tmp, step, self.settings.keep_checkpoints)

        return self.dist.on_main(write)

    def restore(self, checkpoint: Path) -> int:
        """Load optimizer and sampler state of a checkpoint (the model was loaded from it); the next step.
        Under FSDP the main process reads the optimizer file and every shard takes its part."""
        optim = {} if self.dist.sharded and not self.dist.is_main else torch.load(checkpoint / "optimizer.pt",
                                                                                   weights_only=True)
        self.dist.load_optimizer_state(self.engine_model, self.optimizer, optim)
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        self.sampler.load_state_dict(state["sampler"])
        return int(state["step"]) + 1


# ---- building a run ----------------------------------------------------------------------------------


def _load_policy(s: TrainSettings, cfg: TrainConfig, checkpoint: Path | None, *, device: Any = None,
                 precision: str = "fp32") -> tuple[HFPolicy, Reference | None]:
    """The policy (and the KL reference) on `device`. Under bf16 the weights that do not train (a LoRA
    base, the frozen reference) are loaded in bf16; trained weights stay fp32 under autocast."""
    from lemon.train.policy import load_policy

    frozen_dtype = torch.bfloat16 if precision == "bf16" else None
    base_dtype = frozen_dtype if s.lora else None
    if checkpoint is None:
        model, tok = load_policy(s.policy, lora=cfg.lora if s.lora else None, dtype=base_dtype, device=device)
    elif not s.lora:
        model, tok = load_policy(str(checkpoint), device=device)
    else:
        from peft import PeftModel

        base, tok = load_policy(s.policy, dtype=base_dtype, device=device)
        model = PeftModel.from_pretrained(base, str(checkpoint), is_trainable=True)
    if cfg.optim.gradient_checkpointing:
        enable_checkpointing(model)
    reference = None
    if cfg.credit.kl_beta > 0:
        frozen = None
        if not s.lora:
            frozen, _ = load_policy(s.policy, dtype=frozen_dtype, device=device)
            frozen.eval().requires_grad_(False)
        reference = Reference(model, frozen)
    return HFPolicy(model, tok), reference


def enable_checkpointing(model: Any) -> None:
    """Activation (gradient) checkpointing, non-reentrant, so a LoRA model needs no input gradients."""
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.2x
    if enable is not None:
        enable({"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if float(getattr(model.config, "attention_dropout", 0.0) or 0.0) > 0:
        log.warning("gradient checkpointing scores in training mode: attention_dropout %.2f will apply",
                    model.config.attention_dropout)


def worker_executor(pool: Any, roles: RoleLibrary, cfg: TrainConfig) -> Executor:
    """The executor of training rollouts: workers sampled exactly as `lemon eval` samples them."""
    from lemon.llm.base import GenParams
    from lemon.runtime import Budget

    base = {f: getattr(pool.defaults, f) for f in pool.defaults.__dataclass_fields__}
    base["temperature"] = cfg.workers.temperature
    if cfg.workers.max_tokens is not None:
        base["max_tokens"] = cfg.workers.max_tokens
    return Executor(pool, roles, budget=Budget(max_tokens=cfg.rollout.worker_budget_tokens),
                    params=GenParams(**base))


def _run_info(s: TrainSettings, cfg: TrainConfig, split: str, tasks: Sequence[TrainTask]) -> dict[str, Any]:
    from importlib import metadata

    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(s).items() if k != "ablation"}
    versions = {}
    for pkg in ("torch", "transformers", "peft", "lemon-mas"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    data = (split_record(s.benchmark, split, tasks) if split != "custom" else
            {"benchmark": s.benchmark, "split": split, "item_ids": [t.id for t in tasks]})
    return {"settings": settings, "ablation": s.ablation.as_dict(), "config": cfg.model_dump(mode="json"),
            "data": data, "versions": versions}


@dataclass(frozen=True)
class TrainSummary:
    run_dir: Path
    first_step: int
    last_step: int
    final_dir: Path
    last_metrics: dict[str, Any]


def _check_ablation(s: TrainSettings) -> None:
    if s.ablation.fixed_capacity is not None:
        from lemon.llm.pools import pool_level_names

        if s.ablation.fixed_capacity not in pool_level_names(s.pool):
            raise ConfigError(f"--fixed-capacity {s.ablation.fixed_capacity!r} is not a level of pool "
                              f"{s.pool!r}; valid: {', '.join(pool_level_names(s.pool))}")


def _open_run(s: TrainSettings, cfg: TrainConfig, split: str, tasks: Sequence[TrainTask],
              dist: Distributed, extra: dict[str, Any] | None = None) -> tuple[RunDir, Path | None]:
    """The run directory, opened (or checked for --resume) by the main process; its checkpoint for all."""
    run = RunDir(s.run_dir)
    info = {**_run_info(s, cfg, split, tasks), **(extra or {})}
    checkpoint = dist.on_main(lambda: run.open(info, [t.id for t in tasks], resume=s.resume))
    return run, checkpoint


async def _uncertain(s: TrainSettings, tasks: Sequence[TrainTask],
                     executor: Executor) -> tuple[list[TrainTask], dict[str, Any]]:
    """The tasks one CoT agent solves under some but not all worker seeds, and what run.json records of it."""
    from lemon.train.curriculum import uncertain_tasks

    kept, measured = await uncertain_tasks(tasks, executor, samples=s.uncertain_samples or 2, seed=s.seed)
    if not kept:
        raise LemonError(f"no training task is uncertain for one agent at {measured.level} over "
                         f"{measured.samples} worker seeds; use more tasks or another pool")
    return kept, {"uncertainty": asdict(measured)}


async def _open_trainer(s: TrainSettings, tasks: Sequence[TrainTask], split: str,
                        pool: str | None = None) -> tuple[Trainer, int]:
    """Load (or resume) everything a run needs; returns the trainer and its first step. `pool`: the pool
    file the calls go to when it is not `s.pool` itself (its served copy)."""
    from lemon.llm.pools import load_pool

    cfg = effective_config(s)
    _check_ablation(s)
    dist, precision = open_distributed(cfg.optim.precision)
    check_shares(cfg.rollout.tasks_per_step, dist.world)
    roles = RoleLibrary.load()
    executor = worker_executor(load_pool(pool or s.pool, cache=s.cache), roles, cfg)
    extra: dict[str, Any] = {}
    if s.uncertain_samples:
        tasks, extra = await _uncertain(s, tasks, executor)
    run, checkpoint = _open_run(s, cfg, split, tasks, dist, extra)
    policy, reference = _load_policy(s, cfg, checkpoint, device=dist.device, precision=precision)
    optimizer = torch.optim.AdamW(_trainable(policy.model), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    wrapped, optimizer = dist.prepare(policy.model, optimizer)
    policy.synced_gpus = dist.sharded
    sampler = AdaptiveFamilySampler.from_config(cfg.sampler, seed=stable_seed(s.seed, "sampler"))
    trainer = Trainer(s, cfg, policy, executor, roles, tasks, optimizer, sampler,
                      run=run if dist.is_main else None, reference=reference, dist=dist, update_model=wrapped)
    start = 1 if checkpoint is None else trainer.restore(checkpoint)
    if checkpoint is not None:
        log.info("resuming %s from step %d", s.run_dir, start - 1)
    return trainer, start


async def train(s: TrainSettings, *, tasks: Sequence[TrainTask] | None = None, split: str | None = None,
                on_step: ProgressHook | None = None) -> TrainSummary:
    """Run (or resume) GRPO training; see the module docstring. `tasks` overrides the benchmark's split."""
    if s.threads:
        torch.set_num_threads(s.threads)
    if tasks is None:
        split, tasks = load_train_tasks(s.benchmark, limit=s.limit_tasks, data_dir=s.data_dir)
    serve = wants_cuda() if s.serve_workers is None else s.serve_workers
    with workers_for(s.pool, serve, s.run_dir / "workers") as pool:
        return await _train_loop(s, list(tasks), split or "custom", pool, on_step)


async def _train_loop(s: TrainSettings, tasks: list[TrainTask], split: str, pool: str,
                      on_step: ProgressHook | None) -> TrainSummary:
    """The steps, checkpoints and final export of `train`, with the worker calls going to `pool`."""
    trainer, start = await _open_trainer(s, tasks, split, pool if pool != s.pool else None)
    last: dict[str, Any] = {}
    all_invalid = 0
    try:
        for step in range(start, s.steps + 1):
            last = await trainer.step(step)
            all_invalid = all_invalid + 1 if last["valid_rate"] == 0.0 else 0
            main = trainer.dist.is_main  # one process reports progress
            if step % s.save_every == 0 or step == s.steps:
                trainer.save(step)  # every process: FSDP gathers the shards, the main one writes
            if main and on_step is not None:
                on_step(step, last)
            if all_invalid >= 2 and step == start + 1:
                raise LemonError(f"steps {start}-{step}: {INVALID_HINT}")
    finally:
        await trainer.executor.pool.aclose()
    final = export_trained(trainer, s.run_dir / "final")
    return TrainSummary(s.run_dir, start, s.steps, final, last)


def export_trained(trainer: Trainer, target: Path) -> Path:
    """The run's final policy as a plain HF directory. EVERY process calls it: under FSDP the weights are
    gathered from all shards first; the main process writes."""
    weights = trainer.dist.model_state(trainer.engine_model)
    trainer.dist.on_main(lambda: export_final(trainer.policy, target, weights))
    return target


def gathered_copy(policy: HFPolicy, weights: dict[str, torch.Tensor]) -> HFPolicy:
    """A CPU policy of the same architecture (and adapter) holding `weights`, the state gathered from FSDP
    shards: the live module holds only this process's shards, so it cannot be merged or saved itself.
    Built on the meta device and filled by assignment, so the weights are not copied a second time."""
    from transformers import AutoModelForCausalLM

    live = policy.model
    base = live.get_base_model() if hasattr(live, "get_base_model") else live
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(base.config)
        if hasattr(live, "peft_config"):
            from peft import get_peft_model

            model = get_peft_model(model, live.peft_config["default"])
    model.load_state_dict(weights, assign=True)
    model.tie_weights()
    return HFPolicy(model, policy.tokenizer)


def export_final(policy: HFPolicy | PolicyHandle, target: Path,
                 weights: dict[str, torch.Tensor] | None = None) -> None:
    """Save the trained policy as a plain HF directory (LoRA merged), atomically; `weights`: the state
    gathered from FSDP shards (`Distributed.model_state`)."""
    import copy
    import os
    import shutil

    tmp = target.with_name(f".{target.name}-tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if weights is not None:
        assert isinstance(policy, HFPolicy), "only an HF policy is ever sharded"
        policy = gathered_copy(policy, weights)
    model = policy.model
    if hasattr(model, "merge_and_unload"):
        policy = HFPolicy(copy.deepcopy(model).merge_and_unload(), policy.tokenizer)  # type: ignore[union-attr]
    policy.save(tmp)
    if target.exists():
        shutil.rmtree(target)
    os.rename(tmp, target)
