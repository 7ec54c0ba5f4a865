"""`credit.reward_room` and `credit.pairwise_room`, the signal floor's measure, checked against what autograd
computes for the losses they stand for: how hard the reward terms push the logits, whatever lies behind them."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.train
import torch  # noqa: E402

from lemon.train.credit import FieldPair, pairwise_field_loss, pairwise_room, reward_room  # noqa: E402


@pytest.mark.parametrize("seed", range(8))
def test_reward_room_bounds_the_logit_gradient_of_the_reward_terms(seed: int) -> None:
    """Per token, the gradient of w * log p(token) with respect to the logits is w * (onehot - p): its norm lies
    between |w|(1 - p) and sqrt(2)|w|(1 - p), so the summed room brackets the summed logit-gradient norms."""
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(3, 5, 7, generator=gen) * 4).requires_grad_(True)
    tokens = torch.randint(0, 7, (3, 5), generator=gen)
    weights = torch.randn(3, 5, generator=gen)
    mask = (torch.rand(3, 5, generator=gen) > 0.2).float()
    logprobs = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]
    (weights * logprobs * mask).sum().backward()
    assert logits.grad is not None
    grad_norms = float(logits.grad.norm(dim=-1).sum())
    room = float(reward_room(logprobs.detach(), weights, mask))
    assert room <= grad_norms + 1e-5 and grad_norms <= math.sqrt(2) * room + 1e-5


def test_reward_room_is_zero_without_weight_or_without_room() -> None:
    certain = torch.zeros(2, 4)  # log p = 0: the policy writes every token with p = 1
    assert float(reward_room(certain, torch.ones(2, 4), torch.ones(2, 4))) == 0.0
    assert float(reward_room(torch.full((2, 4), -1.0), torch.zeros(2, 4), torch.ones(2, 4))) == 0.0
    assert float(reward_room(torch.full((2, 4), -1.0), torch.ones(2, 4), torch.zeros(2, 4))) == 0.0


@pytest.mark.parametrize(("margin", "delta"), [(0.0, 0.5), (3.0, 0.5), (3.0, -0.5), (-8.0, 1.0), (900.0, -1.0)])
def test_pairwise_room_is_the_pairwise_losss_gradient_on_its_margin(margin: float, delta: float) -> None:
    """|d loss / d margin| = weight * |Δ| * sigmoid(-sign(Δ) * margin), finite at any margin (900 nats
    overflows a plain exp)."""
    written = torch.tensor(margin, requires_grad=True)
    logprobs = torch.zeros(1, 3, 2)
    logprobs = logprobs.index_put((torch.tensor([0]), torch.tensor([1]), torch.tensor([0])), written[None])
    pairs = [[FieldPair(position=1, alt_id=0, delta=delta, weight=2.0)]]
    pairwise_field_loss(logprobs, pairs).backward()
    assert written.grad is not None
    assert pairwise_room(logprobs.detach(), pairs) == pytest.approx(abs(float(written.grad)), rel=1e-5, abs=1e-12)
