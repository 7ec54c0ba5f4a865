"""`credit.tied_cost`: a group whose samples all succeed alike gets its cost contrast in standard units, so the
signal floor no longer skips it (the table's GRPO skipped all nine such batches, docs/results.md)."""

from __future__ import annotations

import math
import statistics

import pytest

pytestmark = pytest.mark.train
import torch  # noqa: E402

from lemon.train.batch import build_batch  # noqa: E402
from lemon.train.config import CreditConfig, OptimConfig  # noqa: E402
from lemon.train.credit import TIED_COST_STD_FLOOR, group_advantages, reward_room, tied_cost_advantages  # noqa: E402
from lemon.train.generation import Completion  # noqa: E402
from lemon.train.reward import RewardBreakdown  # noqa: E402
from lemon.train.rollout import GroupResult, Sample  # noqa: E402

ALL_RIGHT = [1.071, 1.052, 1.064, 1.071]  # the same success, different token costs (the efficiency bonus)


def test_a_success_tied_group_gets_its_cost_contrast_in_standard_units() -> None:
    adv = tied_cost_advantages(ALL_RIGHT, [1.0] * 4, [True] * 4, 0.5)
    assert adv is not None
    assert math.fsum(adv) == pytest.approx(0.0, abs=1e-12)
    assert statistics.pstdev(adv) == pytest.approx(0.5)
    assert sorted(range(4), key=adv.__getitem__) == sorted(range(4), key=ALL_RIGHT.__getitem__)  # order kept


@pytest.mark.parametrize(("successes", "valid", "weight", "rewards"), [
    ([1.0, 0.0, 1.0, 1.0], [True] * 4, 0.5, ALL_RIGHT),  # a success contrast: reward units, as before
    ([0.0] * 4, [True] * 4, 0.5, [0.0, -0.01, 0.0, -0.02]),  # all wrong: the cheapest spec is not a better one
    ([1.0] * 4, [True, True, True, False], 0.5, ALL_RIGHT),  # an invalid spec's penalty is a contrast of its own
    ([1.0] * 4, [True] * 4, 0.0, ALL_RIGHT),  # off
    ([1.0] * 4, [True] * 4, 0.5, [1.06] * 4),  # nothing to contrast
])
def test_any_other_group_keeps_its_advantages(successes: list[float], valid: list[bool], weight: float,
                                              rewards: list[float]) -> None:
    assert tied_cost_advantages(rewards, successes, valid, weight) is None


def test_a_spread_of_noise_is_not_blown_up_to_standard_units() -> None:
    rewards = [1.0, 1.0 + 1e-6, 1.0, 1.0 - 1e-6]
    adv = tied_cost_advantages(rewards, [1.0] * 4, [True] * 4, 0.5)
    assert adv is not None and max(map(abs, adv)) <= 0.5 * 1e-6 / TIED_COST_STD_FLOOR + 1e-12


def _group(task: str, rewards: list[float], successes: list[float]) -> GroupResult:
    samples = []
    for r, s in zip(rewards, successes, strict=True):
        sample = Sample(completion="agents: []", valid=True, success=s)
        sample.reward = RewardBreakdown(r, s, r - s, 0.0, 0.0, True)
        samples.append(sample)
    return GroupResult(task, samples)


def _completions(n: int, length: int = 6) -> list[Completion]:
    return [Completion([0], list(range(1, length + 1)), "x" * length, [(i, i + 1) for i in range(length)], True)
            for _ in range(n)]


def _signal(advantages: list[float], length: int = 6, p: float = 0.99) -> float:
    """The signal floor's measure of a batch whose every token the policy writes with probability p."""
    weights = torch.tensor(advantages)[:, None].expand(-1, length)
    logprobs = torch.full_like(weights, math.log(p))
    return float(reward_room(logprobs, weights, torch.ones_like(weights))) / weights.numel()


def test_the_batch_gives_tied_groups_standard_units_and_the_floor_lets_them_through() -> None:
    """A batch of one success-tied group and one with a success contrast: off, the tied group's advantages
    are its reward differences and a confident policy's signal is under the packaged floor; on, the tied group
    is in standard units and clears it, while the contrast group's advantages do not move."""
    groups = [_group("tied", ALL_RIGHT, [1.0] * 4), _group("mixed", [1.07, 0.0, 1.05, 0.0], [1.0, 0.0, 1.0, 0.0])]
    comps = [_completions(4), _completions(4)]
    off = build_batch(groups, comps, CreditConfig(), cf=False)
    on = build_batch(groups, comps, CreditConfig(tied_cost=0.5), cf=False)
    assert off.advantages[:4] == group_advantages(ALL_RIGHT)
    assert on.advantages[4:] == off.advantages[4:] == group_advantages([1.07, 0.0, 1.05, 0.0])
    assert statistics.pstdev(on.advantages[:4]) == pytest.approx(0.5)
    floor = OptimConfig().min_signal
    assert _signal(off.advantages[:4]) < floor < _signal(on.advantages[:4])
