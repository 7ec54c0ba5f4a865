"""Learning you can see in CI: the REAL trainer (rollout phases, credit, loss, Adam) on a simulated
environment must raise the policy's expected success; with lr = 0 the same run must not.

The environment and the policy are named test doubles (`lemon.train.simulate`): workers whose success
depends on their capacity level and on a right parent note, and a factorised policy over the fields of a
two-agent template. The metric is the policy's EXACT expected success (enumerated over its teams), so the
assertion does not depend on sampling noise of the last steps.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.train

from lemon.train.simulate import best_success, expected_success, simulated_trainer  # noqa: E402

STEPS = 40
MARGIN = 0.12


async def _gain(seed: int, lr: float, cf: bool = True) -> tuple[float, float, list[float]]:
    trainer = simulated_trainer(seed=seed, cf=cf, lr=lr)
    before = expected_success(trainer.policy)
    rewards = [(await trainer.step(step))["reward_mean"] for step in range(1, STEPS + 1)]
    return before, expected_success(trainer.policy), rewards


@pytest.mark.parametrize("seed", [0, 1])
async def test_grpo_raises_expected_success(seed: int) -> None:
    before, after, rewards = await _gain(seed, lr=0.05)
    assert after - before >= MARGIN, (before, after)
    assert after <= best_success() + 1e-9
    # the sampled rewards move the same way (10-step windows of 16 samples each)
    assert sum(rewards[-10:]) / 10 > sum(rewards[:10]) / 10


async def test_global_only_also_learns() -> None:
    before, after, _ = await _gain(0, lr=0.05, cf=False)
    assert after - before >= MARGIN, (before, after)


@pytest.mark.parametrize("seed", [0, 1])
async def test_no_learning_at_lr_zero(seed: int) -> None:
    """The control: the same run with learning switched off leaves the policy exactly where it was."""
    before, after, _ = await _gain(seed, lr=0.0)
    assert after == pytest.approx(before, abs=1e-12)
    assert after - before < MARGIN
