"""Loss accumulation: forward + backward over the micro-batches of one epoch, as one token mean.

The policy-gradient and counterfactual terms (`credit`) are scaled by each micro-batch's share of the global
batch's tokens, so the gradient is that of one token mean whatever the micro-batching and process count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from lemon.llm.constrained import SpecDecoding
from lemon.train.batch import StepBatch
from lemon.train.config import TrainConfig
from lemon.train.credit import (
    FieldPair,
    counterfactual_advantages,
    counterfactual_loss,
    k3_kl,
    pairwise_field_loss,
    pairwise_room,
    policy_gradient_loss,
    reward_room,
)
from lemon.train.distributed import Distributed
from lemon.train.generation import score_completions
from lemon.train.microbatch import can_share_prompt, micro_batches
from lemon.train.policy_handle import Reference


@dataclass
class Memo:
    """Per micro-batch tensors kept across epochs: the sampling policy's log-probs, the reference's and the
    grammar's packed masks (replayed once per step)."""

    old: dict[int, torch.Tensor] = field(default_factory=dict)
    ref: dict[int, torch.Tensor] = field(default_factory=dict)
    masks: dict[int, torch.Tensor] = field(default_factory=dict)


def _alt_rows(completions: Sequence[Sequence[int]], pairs: Sequence[Sequence[FieldPair]]) -> list[list[int]]:
    """Per row, the completion with each pair's alternative token at its position (what `alt_ids` scores)."""
    rows = [list(c) for c in completions]
    for row, row_pairs in zip(rows, pairs, strict=True):
        for pair in row_pairs:
            row[pair.position] = pair.alt_id
    return rows


def _grammatical(pairs: list[list[FieldPair]], masks: torch.Tensor | None) -> list[list[FieldPair]]:
    """The pairs whose alternative token the grammar allows where it would be written: an edited spec renders
    into the grammar, so all of them; one that did not would have log-probability -inf and no preference."""
    if masks is None:
        return pairs
    return [[p for p in row if int(masks[i, p.position, p.alt_id // 32]) >> (p.alt_id % 32) & 1] for i, row in
            enumerate(pairs)]


def _masks(memo: Memo, b: int, rows: Sequence[Sequence[int]], decoding: SpecDecoding | None) -> torch.Tensor | None:
    """The grammar's packed masks of micro-batch `b` (replayed once a step), None without a grammar."""
    if decoding is not None and b not in memo.masks:
        memo.masks[b] = decoding.masks(rows, max(1, max(len(c) for c in rows)))
    return memo.masks.get(b)


def accumulate(model: torch.nn.Module, batch: StepBatch, cfg: TrainConfig, pad_id: int, reference: Reference | None,
                stats: dict[str, float] | None, n_tokens: float, dist: Distributed, memo: Memo,
                first: bool, decoding: SpecDecoding | None = None) -> None:
    """Forward + backward over micro-batches; the loss is one token mean over the whole (global) batch.

    Per micro-batch of b rows: log-probs `lp` [b, T] (or [b, T, 2] with the pairwise alternatives), group
    advantages broadcast to [b, T], counterfactual advantages `cf` [b, T], `mask` [b, T]; gradients accumulate
    into `model`, nothing is returned (`stats`, when given, gets the first epoch's loss parts and `signal`, the
    reward terms' push on the logits per token: `credit.reward_room`).

    `n_tokens` counts the completion tokens of every process; the gradient all-reduce runs on the last
    micro-batch only. Epochs after the first score PPO's clipped ratio against the first epoch's log-probs.
    With `decoding` (the completions were sampled under the spec grammar) every log-prob, the reference's too,
    is that of the grammar-masked, renormalised distribution: the grammar is replayed over the sampled ids.
    """
    temp = cfg.rollout.temperature
    share: bool = can_share_prompt(dist.unwrap(model), cfg)
    slices = micro_batches(batch.prompts, cfg.optim.micro_batch, by_prompt=share)
    dist.same_count(len(slices), "micro-batches")
    for k, sl in enumerate(slices):
        b = sl.start
        with dist.no_sync(model, sync=k == len(slices) - 1):
            masks = _masks(memo, b, batch.completions[sl], decoding)
            pairs = _grammatical(batch.pairs(sl), masks)
            alt = _alt_rows(batch.completions[sl], pairs) if any(pairs) else None
            lp, mask, _ = score_completions(model, batch.prompts[sl], batch.completions[sl], pad_id, temp, share, alt,
                                            masks)
            lp, lp_pair = (lp, None) if alt is None else (lp[..., 0], lp)
            t = lp.shape[1]
            adv = torch.tensor(batch.advantages[sl], dtype=lp.dtype, device=lp.device)[:, None].expand(-1, t)
            cf = torch.stack([counterfactual_advantages(t, terms).to(lp.device, lp.dtype)
                              for terms in batch.cf_terms[sl]])
            if reference is not None and b not in memo.ref:
                memo.ref[b] = reference.logprobs(batch.prompts[sl], batch.completions[sl], pad_id, temp, share, masks)
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
            pushed = float(reward_room(lp.detach(), adv + cf, mask))
            if lp_pair is not None:
                pushed += pairwise_room(lp_pair.detach(), pairs)
            stats["signal"] += pushed / n_tokens
            stats["loss_pg"] += float(pg.detach())
            stats["loss_cf"] += float(cfl.detach())
            stats["entropy"] += float(-(lp.detach() * mask).sum()) / n_tokens
            if ref_lp is not None:
                stats["kl"] += float((k3_kl(lp.detach(), ref_lp) * mask).sum()) / n_tokens
