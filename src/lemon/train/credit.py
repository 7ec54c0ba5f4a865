"""Loss pieces of orchestration-level GRPO with localized counterfactual credit (method.md section 4).

Every completion token gets the group-relative advantage of its spec. A counterfactual (one field of a
valid spec edited, the edited spec re-executed) gives Δ = r(original) - r(edited); the tokens of that
field in the ORIGINAL completion additionally get ``weight * Δ``.

Sign: Δ > 0 means the original field value scored better than the edit, so its tokens are reinforced
(their log-probabilities pushed up); Δ < 0 means the edit was better, so they are discouraged.

The counterfactual term is kept as a separate additive loss, ``counterfactual_loss``, whose per-token
advantages are exactly zero outside the span; its gradient w.r.t. the logits of any position outside the
span is therefore exactly zero (tests/train/test_locality.py proves it on the real policy). Because both
losses use the same masked token mean, ``policy_gradient_loss(lp, g + c, m) == policy_gradient_loss(lp, g,
m) + counterfactual_loss(lp, c, m)``: splitting changes nothing but makes locality checkable.

Nothing here calls ``.item()`` or leaves torch on the gradient path; advantages are plain data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CounterfactualTerm:
    """One counterfactual: the span's token indices (into the completion), Δ, and its weight λ."""

    token_indices: Sequence[int]
    delta: float
    weight: float = 1.0


def group_advantages(rewards: Sequence[float], eps: float = 1e-6) -> list[float]:
    """GRPO advantages (r - mean) / (std + eps) within one group; all-equal rewards -> zeros.

    Population std (ddof=0), so a group's advantages have unit variance. A group whose rewards are all
    equal carries no preference, hence exact zeros rather than noise divided by eps.
    """
    rs = [float(r) for r in rewards]
    if not rs:
        return []
    if not all(math.isfinite(r) for r in rs):
        raise ValueError(f"non-finite reward in group: {rs}")
    if max(rs) == min(rs):
        return [0.0] * len(rs)
    mean = math.fsum(rs) / len(rs)
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in rs) / len(rs))
    return [(r - mean) / (std + eps) for r in rs]


def counterfactual_advantages(seq_len: int, cf_terms: Sequence[CounterfactualTerm]) -> torch.Tensor:
    """Per-token counterfactual advantages [T]: sum of weight * Δ on each term's span, exact 0 elsewhere."""
    out = torch.zeros(seq_len, dtype=torch.float32)
    for term in cf_terms:
        if not math.isfinite(term.delta) or not math.isfinite(term.weight):
            raise ValueError(f"non-finite counterfactual delta/weight: {term.delta}, {term.weight}")
        idx = list(term.token_indices)
        if not idx:
            continue
        if min(idx) < 0 or max(idx) >= seq_len:
            raise IndexError(f"span token indices {min(idx)}..{max(idx)} outside completion of {seq_len}")
        # A set: a token listed twice in one span must not get the term twice.
        out[sorted(set(idx))] += float(term.weight) * float(term.delta)
    return out


def per_token_advantages(seq_len: int, group_advantage: float,
                         cf_terms: Sequence[CounterfactualTerm] = ()) -> torch.Tensor:
    """Per-token advantages [T]: the group advantage everywhere plus the counterfactual terms on spans."""
    return torch.full((seq_len,), float(group_advantage), dtype=torch.float32) + counterfactual_advantages(
        seq_len, cf_terms)


def token_logprobs(logits: torch.Tensor, completion_ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Log-probs [B, T] of the completion tokens under `logits` [B, P+T, V] of the full sequence.

    Logits at position t predict token t+1, so completion token i (at sequence position P+i) is scored by
    the logits at position P+i-1. Getting this off by one would credit the field's neighbour instead.
    """
    if prompt_len < 1:
        raise ValueError("prompt_len must be >= 1: the first completion token is predicted from the prompt")
    t = completion_ids.shape[1]
    pred = logits[:, prompt_len - 1: prompt_len - 1 + t, :]
    # At least fp32 (bf16 log-softmax is too coarse for ratios); fp64 stays fp64.
    logp = torch.log_softmax(pred.to(torch.promote_types(pred.dtype, torch.float32)), dim=-1)
    return torch.gather(logp, 2, completion_ids.unsqueeze(-1)).squeeze(-1)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-level mean over the batch (every real token weighs the same, whatever its sequence length)."""
    keep = mask.bool()
    # where, not multiply: a padded position whose value is inf/nan must not poison the sum.
    total = torch.where(keep, values, torch.zeros_like(values)).sum()
    return total / keep.sum().clamp(min=1).to(values.dtype)


def policy_gradient_loss(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                         old_logprobs: torch.Tensor | None = None, clip_eps: float = 0.2,
                         ref_logprobs: torch.Tensor | None = None, kl_beta: float = 0.0) -> torch.Tensor:
    """GRPO/REINFORCE loss: masked token mean of -(A * logp); optional PPO clip and KL to a reference.

    With `old_logprobs` (several optimiser steps per batch) the surrogate is PPO's clipped
    -min(rho A, clip(rho, 1-eps, 1+eps) A), rho = exp(logp - old). With `ref_logprobs` and kl_beta > 0,
    adds beta * KL via the k3 estimator exp(ref - logp) - (ref - logp) - 1 (non-negative, unbiased).
    """
    adv = advantages.detach()
    if old_logprobs is None:
        per_token = -(adv * logprobs)
    else:
        ratio = torch.exp(logprobs - old_logprobs.detach())
        clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
        per_token = -torch.minimum(ratio * adv, clipped * adv)
    if ref_logprobs is not None and kl_beta > 0.0:
        diff = ref_logprobs.detach() - logprobs
        per_token = per_token + kl_beta * (torch.exp(diff) - diff - 1.0)
    return _masked_mean(per_token, mask)


def counterfactual_loss(logprobs: torch.Tensor, cf_advantages: torch.Tensor,
                        mask: torch.Tensor) -> torch.Tensor:
    """The counterfactual term alone: masked token mean of -(A_cf * logp), A_cf exactly 0 off the spans.

    Same normalisation as `policy_gradient_loss`, so adding the two equals one policy-gradient loss with
    per-token advantages group + cf. Off-span tokens contribute 0 * d(logp) = exactly zero gradient.
    """
    return _masked_mean(-(cf_advantages.detach() * logprobs), mask)
