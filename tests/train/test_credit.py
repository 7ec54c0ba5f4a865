"""Loss pieces: group advantages, per-token advantages, the split PG + counterfactual loss."""

from __future__ import annotations

import math

import pytest
import torch

from lemon.train.credit import (
    CounterfactualTerm,
    counterfactual_advantages,
    counterfactual_loss,
    group_advantages,
    per_token_advantages,
    policy_gradient_loss,
    token_logprobs,
)


def test_group_advantages_known_values() -> None:
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], eps=0.0)
    # mean 0.25, population std sqrt(3)/4
    assert adv[0] == pytest.approx(math.sqrt(3))
    assert adv[1:] == pytest.approx([-1 / math.sqrt(3)] * 3)
    adv = group_advantages([3.0, 1.0])
    assert adv == pytest.approx([1.0, -1.0], abs=1e-5)
    assert sum(group_advantages([0.3, -0.2, 1.1, 0.7])) == pytest.approx(0.0, abs=1e-12)


def test_group_advantages_degenerate() -> None:
    assert group_advantages([0.1, 0.1, 0.1, 0.1]) == [0.0, 0.0, 0.0, 0.0]
    assert group_advantages([]) == []
    assert group_advantages([5.0]) == [0.0]
    with pytest.raises(ValueError):
        group_advantages([1.0, float("nan")])


def test_per_token_advantages_cf_only_on_span() -> None:
    adv = per_token_advantages(10, 0.5, [CounterfactualTerm([3, 4, 5], delta=0.3, weight=2.0)])
    assert adv.shape == (10,)
    inside = torch.tensor([3, 4, 5])
    outside = torch.tensor([0, 1, 2, 6, 7, 8, 9])
    assert torch.allclose(adv[inside], torch.full((3,), 0.5 + 0.6))
    assert torch.equal(adv[outside], torch.full((7,), 0.5))
    cf = counterfactual_advantages(10, [CounterfactualTerm([3, 4, 5], 0.3, 2.0)])
    assert torch.equal(cf[outside], torch.zeros(7))


def test_per_token_advantages_terms_add_and_validate() -> None:
    terms = [CounterfactualTerm([1, 2], 1.0, 1.0), CounterfactualTerm([2, 3], -0.5, 1.0),
             CounterfactualTerm([], 9.0, 1.0), CounterfactualTerm([4, 4], 1.0, 1.0)]
    adv = per_token_advantages(6, 0.0, terms)
    assert adv.tolist() == pytest.approx([0.0, 1.0, 0.5, -0.5, 1.0, 0.0])  # duplicate index counted once
    with pytest.raises(IndexError):
        per_token_advantages(3, 0.0, [CounterfactualTerm([3], 1.0)])
    with pytest.raises(ValueError):
        per_token_advantages(3, 0.0, [CounterfactualTerm([0], float("inf"))])


def test_split_losses_equal_combined_loss() -> None:
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(3, 7, generator=g).requires_grad_()
    mask = torch.ones(3, 7)
    mask[1, 5:] = 0
    group = torch.randn(3, 1, generator=g).expand(3, 7)
    cf = torch.zeros(3, 7)
    cf[0, 2:4] = 0.7
    cf[2, 6] = -0.2
    combined = policy_gradient_loss(lp, group + cf, mask)
    split = policy_gradient_loss(lp, group, mask) + counterfactual_loss(lp, cf, mask)
    assert torch.allclose(combined, split)
    (gc,) = torch.autograd.grad(combined, lp)
    (gs,) = torch.autograd.grad(policy_gradient_loss(lp, group, mask) + counterfactual_loss(lp, cf, mask), lp)
    assert torch.allclose(gc, gs)


def test_masked_positions_get_no_gradient_even_if_inf() -> None:
    lp = torch.tensor([[-1.0, -2.0, -float("inf")]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])
    loss = policy_gradient_loss(lp, torch.ones(1, 3), mask)
    assert torch.isfinite(loss)
    loss.backward()
    assert lp.grad is not None
    assert lp.grad[0, 2] == 0
    assert torch.allclose(lp.grad[0, :2], torch.full((2,), -0.5))


def test_ppo_clip_same_gradient_on_policy_and_clips_off_policy() -> None:
    lp = -torch.rand(2, 5).requires_grad_()
    adv = torch.randn(2, 5)
    mask = torch.ones(2, 5)
    (g_plain,) = torch.autograd.grad(policy_gradient_loss(lp, adv, mask), lp)
    (g_ppo,) = torch.autograd.grad(policy_gradient_loss(lp, adv, mask, old_logprobs=lp.detach()), lp)
    assert torch.allclose(g_plain, g_ppo)
    # Ratio far above 1 + eps with a positive advantage: clipped, so no gradient.
    old = (lp.detach() - 1.0)
    (g_clip,) = torch.autograd.grad(
        policy_gradient_loss(lp, torch.ones(2, 5), mask, old_logprobs=old, clip_eps=0.2), lp)
    assert torch.equal(g_clip, torch.zeros(2, 5))


def test_kl_term() -> None:
    lp = -torch.rand(2, 5).requires_grad_()
    zero = torch.zeros(2, 5)
    mask = torch.ones(2, 5)
    same = policy_gradient_loss(lp, zero, mask, ref_logprobs=lp.detach(), kl_beta=0.5)
    assert same.abs() < 1e-7
    other = policy_gradient_loss(lp, zero, mask, ref_logprobs=lp.detach() - 0.3, kl_beta=0.5)
    assert other > 0


def test_token_logprobs_alignment() -> None:
    """Logits at position t score token t+1: completion token i is scored at position P + i - 1."""
    vocab, prompt_len = 5, 3
    completion = torch.tensor([[4, 1, 2]])
    logits = torch.zeros(1, prompt_len + 3, vocab)
    for i, tok in enumerate(completion[0].tolist()):
        logits[0, prompt_len - 1 + i, tok] = 10.0  # confident at the predicting position
    lp = token_logprobs(logits, completion, prompt_len)
    assert lp.shape == (1, 3)
    assert torch.all(lp > -0.01)
    shifted = token_logprobs(torch.roll(logits, 1, dims=1), completion, prompt_len)
    assert torch.all(shifted < -1.0)
    with pytest.raises(ValueError):
        token_logprobs(logits, completion, 0)
