"""Loss pieces: group advantages, per-token advantages, the split PG + counterfactual loss."""

from __future__ import annotations

import math

import pytest
import torch

from lemon.train.config import RewardConfig
from lemon.train.credit import (
    CounterfactualTerm,
    advantage_scales,
    counterfactual_advantages,
    counterfactual_loss,
    group_advantages,
    k3_kl,
    per_token_advantages,
    policy_gradient_loss,
    token_logprobs,
)
from lemon.train.reward import compute_reward


def test_group_advantages_known_values() -> None:
    # Default scale 1: advantages in reward units (Dr. GRPO)
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert group_advantages([3.0, 1.0], scale=2.0) == pytest.approx([0.5, -0.5])
    assert sum(group_advantages([0.3, -0.2, 1.1, 0.7])) == pytest.approx(0.0, abs=1e-12)
    # the original GRPO per-group std is still available, floored
    (s,) = advantage_scales([[1.0, 0.0, 0.0, 0.0]], "group_std")
    assert group_advantages([1.0, 0.0, 0.0, 0.0], s)[0] == pytest.approx(math.sqrt(3))


def test_group_advantages_degenerate() -> None:
    assert group_advantages([0.1, 0.1, 0.1, 0.1]) == [0.0, 0.0, 0.0, 0.0]
    assert group_advantages([]) == []
    assert group_advantages([5.0]) == [0.0]
    with pytest.raises(ValueError):
        group_advantages([1.0, float("nan")])
    with pytest.raises(ValueError):
        group_advantages([1.0, 0.0], scale=0.0)
    with pytest.raises(ValueError):
        advantage_scales([[1.0]], "z-score")  # type: ignore[arg-type]


def test_tie_breaker_groups_are_not_inflated_to_success_size() -> None:
    """Review item 1: an all-wrong group differing by one agent must not look like a solved one."""
    cfg = RewardConfig()
    wrong = [compute_reward(cfg, success=0.0, tokens=300, n_agents=n, n_edges=n - 1).total for n in (1, 2, 2, 2)]
    solved = [compute_reward(cfg, success=s, tokens=300, n_agents=2, n_edges=1).total for s in (1, 0, 0, 0)]
    for mode in ("none", "batch_std", "group_std"):
        scales = advantage_scales([wrong, solved], mode)  # type: ignore[arg-type]
        tie = group_advantages(wrong, scales[0])
        win = group_advantages(solved, scales[1])
        assert max(abs(a) for a in tie) < 0.1 * max(abs(a) for a in win), (mode, tie, win)
    # and correct groups that differ by 300 worker tokens are not +-1 either
    cheap_dear = [compute_reward(cfg, success=1.0, tokens=t, n_agents=2, n_edges=1).total for t in (300, 600)]
    assert max(abs(a) for a in group_advantages(cheap_dear)) < 0.05


def test_span_weight_is_per_field_not_per_token() -> None:
    """Review item 5: a 30-token duty and a 1-token capacity with the same delta get the same total push."""
    duty = counterfactual_advantages(40, [CounterfactualTerm(list(range(5, 35)), delta=0.5, weight=1.0)])
    cap = counterfactual_advantages(40, [CounterfactualTerm([38], delta=0.5, weight=1.0)])
    assert float(duty.sum()) == pytest.approx(0.5) and float(cap.sum()) == pytest.approx(0.5)
    assert float(duty[5]) == pytest.approx(0.5 / 30)


def test_token_logprobs_use_the_sampling_temperature() -> None:
    """Review item 6: completions sampled at T are scored under softmax(z / T), not softmax(z)."""
    torch.manual_seed(0)
    logits = torch.randn(1, 4, 7)
    ids = torch.tensor([[2, 5, 1]])
    lp = token_logprobs(logits, ids, 1, temperature=0.5)
    expect = torch.log_softmax(logits[:, :3] / 0.5, -1).gather(2, ids[..., None]).squeeze(-1)
    assert torch.allclose(lp, expect)
    assert not torch.allclose(lp, token_logprobs(logits, ids, 1))


def test_k3_kl_is_clamped_and_finite() -> None:
    """Review item 7: an extreme log-ratio cannot overflow the KL term."""
    lp = torch.tensor([[-200.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -1.0]])
    kl = k3_kl(lp, ref)
    assert torch.isfinite(kl).all() and float(kl.detach()[0, 1]) == 0.0
    loss = policy_gradient_loss(lp, torch.zeros(1, 2), torch.ones(1, 2), ref_logprobs=ref, kl_beta=0.1)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()


def test_per_token_advantages_cf_only_on_span() -> None:
    adv = per_token_advantages(10, 0.5, [CounterfactualTerm([3, 4, 5], delta=0.3, weight=2.0)])
    assert adv.shape == (10,)
    inside = torch.tensor([3, 4, 5])
    outside = torch.tensor([0, 1, 2, 6, 7, 8, 9])
    assert torch.allclose(adv[inside], torch.full((3,), 0.5 + 0.6 / 3))  # weight * delta spread over 3
    assert torch.equal(adv[outside], torch.full((7,), 0.5))
    cf = counterfactual_advantages(10, [CounterfactualTerm([3, 4, 5], 0.3, 2.0)])
    assert torch.equal(cf[outside], torch.zeros(7))


def test_per_token_advantages_terms_add_and_validate() -> None:
    terms = [CounterfactualTerm([1, 2], 1.0, 1.0), CounterfactualTerm([2, 3], -0.5, 1.0),
             CounterfactualTerm([], 9.0, 1.0), CounterfactualTerm([4, 4], 1.0, 1.0)]
    adv = per_token_advantages(6, 0.0, terms)
    # per span: 1.0 over 2 tokens, -0.5 over 2 tokens, a duplicate index counted once
    assert adv.tolist() == pytest.approx([0.0, 0.5, 0.25, -0.25, 1.0, 0.0])
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
