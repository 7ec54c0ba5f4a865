"""Loss pieces of orchestration-level GRPO with localized counterfactual credit (method.md section 4).

Every completion token gets the group-relative advantage of its spec, (r - group mean) / s. A
counterfactual (one field of a valid spec edited, the edited spec re-executed) gives Δ = r(original) -
r(edited); the tokens of that field in the ORIGINAL completion additionally get ``weight * Δ / s`` in total,
spread over the field's tokens. Both terms share the divisor s (`advantage_scales`; 1 by default, so both are
in reward units): a Δ of one flipped success weighs what one solved spec weighs in its group.

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
from typing import Literal

import torch


@dataclass(frozen=True)
class FieldPair:
    """A counterfactual as a preference at the token where the original and the edited text first differ:
    at completion position `position` the policy wrote one token and the edit writes `alt_id`."""

    position: int
    alt_id: int
    delta: float
    weight: float = 1.0


@dataclass(frozen=True)
class CounterfactualTerm:
    """One counterfactual: the span's token indices (into the completion), Δ, and its weight λ."""

    token_indices: Sequence[int]
    delta: float
    weight: float = 1.0


AdvantageScale = Literal["none", "batch_std", "group_std"]
ADVANTAGE_SCALES: tuple[str, ...] = ("none", "batch_std", "group_std")

# The k3 KL estimator exponentiates the log-ratio; beyond |log ratio| = 10 it is dominated by one token whose
# probability moved by e^10, so the ratio is clamped there (verl clamps its low-variance KL the same way).
KL_LOG_RATIO_CLAMP = 10.0


def centered_rewards(rewards: Sequence[float]) -> list[float]:
    """r - mean(r) within one group: GRPO's baseline without the std division (Dr. GRPO).

    Kept in reward units on purpose: a group that differs only by a tie-breaker (one agent fewer, 300 tokens
    less) gets advantages of that tie-breaker's size (~0.01), while a group where one spec solved the task
    gets ~0.75. Dividing by the group std would give both the same +1.73 (review item 1 of issue 10).
    """
    rs = [float(r) for r in rewards]
    if not rs:
        return []
    if not all(math.isfinite(r) for r in rs):
        raise ValueError(f"non-finite reward in group: {rs}")
    if max(rs) == min(rs):
        return [0.0] * len(rs)
    mean = math.fsum(rs) / len(rs)
    return [r - mean for r in rs]


def _std(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def advantage_scales(groups: Sequence[Sequence[float]], mode: AdvantageScale = "none",
                     floor: float = 0.1) -> list[float]:
    """The divisor of each group's advantages AND of its counterfactual deltas (one scale for both).

    - ``none`` (default): 1.0, advantages stay in reward units (Dr. GRPO, Liu et al. 2025).
    - ``batch_std``: the std of all rewards of the step's groups around their group means, floored: one
      divisor for the whole batch, so the ratio between groups is kept.
    - ``group_std``: the original GRPO per-group std, floored at `floor` so an all-wrong group that differs
      by a tie-breaker cannot be blown up to unit variance.
    Using the same divisor for Δ keeps "a flipped success" worth the same in the local and the global term.
    """
    if mode not in ADVANTAGE_SCALES:
        raise ValueError(f"unknown advantage scale {mode!r}; valid: {', '.join(ADVANTAGE_SCALES)}")
    if mode == "none":
        return [1.0] * len(groups)
    if mode == "batch_std":
        pooled = [c for g in groups for c in centered_rewards(g)]
        return [max(_std(pooled), floor)] * len(groups)
    return [max(_std([float(r) for r in g]), floor) for g in groups]


def group_advantages(rewards: Sequence[float], scale: float = 1.0) -> list[float]:
    """Advantages of one group: (r - mean) / scale; all-equal rewards -> exact zeros."""
    if not scale > 0 or not math.isfinite(scale):
        raise ValueError(f"advantage scale must be a positive finite number, got {scale}")
    return [c / scale for c in centered_rewards(rewards)]


#: The least spread (reward units) a success-tied group's costs are divided by: below it the "contrast" is a
#: few tokens of sampling noise (at efficiency_coef 0.1 and a 1,000-token reference, 0.001 is 10 tokens).
TIED_COST_STD_FLOOR = 1e-3


def tied_cost_advantages(rewards: Sequence[float], successes: Sequence[float], valid: Sequence[bool],
                         weight: float) -> list[float] | None:
    """A cost advantage for a group whose samples all succeed alike: `weight` * (r - mean) / std(r), or None
    (the group keeps its advantages in reward units) when `weight` is 0, a sample is invalid, the successes
    differ, they are all 0, or the rewards tie.

    Why: with every sample right, the whole reward contrast is cost (the efficiency bonus and the structure
    cost), ~0.01 in reward units, and the signal floor (`reward_room`) skips such a batch: the table's GRPO
    skipped all nine it met, so the policy learned how few agents an easy task needs only beside a success
    contrast. Normalised, a tied group's cheapest team gets an advantage of about `weight` standard units.
    All-wrong groups are left out on purpose: their cheapest spec is not a better one (reward.py).
    """
    if weight <= 0 or not all(valid) or len(set(successes)) != 1 or not successes[0] > 0:
        return None
    centered = centered_rewards(rewards)
    if not any(centered):
        return None
    spread = max(_std(centered), TIED_COST_STD_FLOOR)
    return [weight * c / spread for c in centered]


def counterfactual_advantages(seq_len: int, cf_terms: Sequence[CounterfactualTerm]) -> torch.Tensor:
    """Per-token counterfactual advantages [T]: weight * Δ / n on each of a term's n span tokens, 0 elsewhere.

    Per-span normalisation: a field's span carries weight * Δ IN TOTAL, spread evenly over its tokens, so a
    30-token duty and a 1-token capacity edited with the same |Δ| get the same push (with a per-token weight,
    the duty would weigh 30x more; review item 5 of issue 10).
    """
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
        tokens = sorted(set(idx))
        out[tokens] += float(term.weight) * float(term.delta) / len(tokens)
    return out


def per_token_advantages(seq_len: int, group_advantage: float,
                         cf_terms: Sequence[CounterfactualTerm] = ()) -> torch.Tensor:
    """Per-token advantages [T]: the group advantage everywhere plus the counterfactual terms on spans."""
    return torch.full((seq_len,), float(group_advantage), dtype=torch.float32) + counterfactual_advantages(
        seq_len, cf_terms)


def token_logprobs(logits: torch.Tensor, completion_ids: torch.Tensor, prompt_len: int,
                   temperature: float = 1.0, alt_ids: torch.Tensor | None = None,
                   allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probs [B, T] of the completion tokens under softmax(`logits` / T), logits [B, P+T, V].

    With `allowed` [B, T, V] (booleans: the tokens a grammar allowed at each completion position, as the sampler
    saw them, `lemon.llm.constrained`), the softmax runs over the allowed tokens only: the distribution the
    completions were sampled from under the grammar, renormalised; a forbidden token has probability zero.

    With `alt_ids` [B, T] (another token per position, e.g. the one a counterfactual edit writes there),
    returns [B, T, 2]: the completion token's log-prob and the alternative's, from the same softmax.

    The temperature is the one the completions were SAMPLED at: the policy-gradient estimator needs the log
    probability of the distribution that drew them (at T != 1 raw logits score another distribution).

    Logits at position t predict token t+1, so completion token i (at sequence position P+i) is scored by
    the logits at position P+i-1. Getting this off by one would credit the field's neighbour instead.
    """
    if prompt_len < 1:
        raise ValueError("prompt_len must be >= 1: the first completion token is predicted from the prompt")
    t = completion_ids.shape[1]
    pred = logits[:, prompt_len - 1: prompt_len - 1 + t, :]
    # At least fp32 (bf16 log-softmax is too coarse for ratios); fp64 stays fp64.
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}")
    scaled = pred.to(torch.promote_types(pred.dtype, torch.float32))
    if temperature != 1.0:
        scaled = scaled / temperature
    if allowed is not None:
        scaled = scaled.masked_fill(~allowed.to(scaled.device), float("-inf"))
    logp = torch.log_softmax(scaled, dim=-1)
    if alt_ids is None:
        return torch.gather(logp, 2, completion_ids.unsqueeze(-1)).squeeze(-1)
    return torch.gather(logp, 2, torch.stack([completion_ids, alt_ids.to(completion_ids.device)], -1))


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

    Shapes: `logprobs`, `advantages`, `mask`, `old_logprobs`, `ref_logprobs` [B, T]; returns a scalar.

    With `old_logprobs` (several optimiser steps per batch) the surrogate is PPO's clipped
    -min(rho A, clip(rho, 1-eps, 1+eps) A), rho = exp(logp - old). With `ref_logprobs` and kl_beta > 0,
    adds beta * KL via the k3 estimator exp(ref - logp) - (ref - logp) - 1 (non-negative; the log-ratio is
    clamped to +-10 so one token cannot make the loss overflow).
    """
    adv = advantages.detach()
    if old_logprobs is None:
        per_token = -(adv * logprobs)
    else:
        ratio = torch.exp(logprobs - old_logprobs.detach())
        clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
        per_token = -torch.minimum(ratio * adv, clipped * adv)
    if ref_logprobs is not None and kl_beta > 0.0:
        per_token = per_token + kl_beta * k3_kl(logprobs, ref_logprobs.detach())
    return _masked_mean(per_token, mask)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || ref): exp(d) - d - 1, d = ref - logp clamped to +-10 (>= 0).

    Shapes: `logprobs`, `ref_logprobs` [B, T] -> [B, T]."""
    diff = torch.clamp(ref_logprobs - logprobs, -KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
    return torch.exp(diff) - diff - 1.0


def counterfactual_loss(logprobs: torch.Tensor, cf_advantages: torch.Tensor,
                        mask: torch.Tensor) -> torch.Tensor:
    """The counterfactual term alone: masked token mean of -(A_cf * logp), A_cf exactly 0 off the spans.
    Shapes: `logprobs`, `cf_advantages`, `mask` [B, T]; returns a scalar.

    Same normalisation as `policy_gradient_loss`, so adding the two equals one policy-gradient loss with
    per-token advantages group + cf. Off-span tokens contribute 0 * d(logp) = exactly zero gradient.
    """
    return _masked_mean(-(cf_advantages.detach() * logprobs), mask)


def pairwise_field_loss(logprobs: torch.Tensor, pairs: Sequence[Sequence[FieldPair]]) -> torch.Tensor:
    """Sum over pairs of weight * |Δ| * softplus(-sign(Δ) * (log p(written) - log p(edited))), a scalar.

    `logprobs` [B, T, 2] holds the written token's and the alternative's log-prob (`token_logprobs` with
    `alt_ids`); `pairs[b]` are row b's pairs. Why not the span term: its gradient on a token is
    A * (onehot - p) and vanishes once the policy writes the span with p ~ 1, which is where a better edit
    must still move it (issue 10: 28 of 29 credited spans had p > 0.99 after 5 steps). This logistic
    preference pushes hardest when the policy prefers the worse value and stops when it prefers the better
    one. Only the logits at each pair's position get a gradient. Callers divide by the batch's token count,
    as the span term's token mean does, so both weigh alike.
    """
    total = logprobs.new_zeros(())
    for b, row in enumerate(pairs):
        for pair in row:
            if not math.isfinite(pair.delta) or not math.isfinite(pair.weight):
                raise ValueError(f"non-finite counterfactual delta/weight: {pair.delta}, {pair.weight}")
            if pair.delta == 0 or pair.weight == 0:
                continue
            margin = logprobs[b, pair.position, 0] - logprobs[b, pair.position, 1]
            sign = 1.0 if pair.delta > 0 else -1.0
            total = total + pair.weight * abs(pair.delta) * torch.nn.functional.softplus(-sign * margin)
    return total


def reward_room(logprobs: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over the masked tokens of |w| * (1 - p), a scalar: how hard the reward terms (group advantage plus
    counterfactual weight `weights`, [B, T]) push the logits, whose gradient on a token is w * (onehot - p)
    with a norm between |w|(1 - p) and sqrt(2)|w|(1 - p). `logprobs`, `mask`: [B, T].

    Why in logit space: a floor on the PARAMETER gradient norm depends on what lies behind the logits (a
    full fine-tune of SmolLM2 gave 8.4e-3 on batches without signal, LoRA 1e-4), so one floor cannot fit both;
    this does not.
    """
    return (weights.abs() * (1.0 - torch.exp(logprobs)) * mask).sum()


def pairwise_room(logprobs: torch.Tensor, pairs: Sequence[Sequence[FieldPair]]) -> float:
    """Sum over pairs of weight * |Δ| * sigmoid(-sign(Δ) * margin): the size of `pairwise_field_loss`'s
    gradient with respect to the margin, i.e. how hard it pushes (`logprobs` [B, T, 2] as there)."""
    total = 0.0
    for b, row in enumerate(pairs):
        for pair in row:
            if pair.delta == 0 or pair.weight == 0:
                continue
            margin = float(logprobs[b, pair.position, 0] - logprobs[b, pair.position, 1])
            push = 0.5 * (1.0 - math.tanh(math.copysign(0.5, pair.delta) * margin))  # sigmoid(-sign * margin)
            total += pair.weight * abs(pair.delta) * push
    return total
