"""Scalar reward of one executed spec: task success + token-efficiency bonus - graph-structure cost.

An invalid spec (does not parse or validate) gets the invalid penalty and nothing else (`invalid_reward`):
it never ran, so it has no success and no cost, and it has no fields whose edits could be credited, which is
why ``allows_counterfactual`` is False for it and the trainer skips counterfactuals.

Arguments are keyword-only: a positional ``compute_reward(None, 0, 0, 0, False, ...)`` hid which number was
which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lemon.train.config import RewardConfig


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward and its terms (kept separately so reports can show what drove it)."""

    total: float
    success: float
    efficiency: float
    structure: float  # a cost: subtracted from the total, reported as a non-negative number
    invalid: float  # the penalty actually applied (0.0 for a valid spec)
    allows_counterfactual: bool


def invalid_reward(cfg: RewardConfig) -> RewardBreakdown:
    """The reward of a spec that does not parse or validate: the penalty alone."""
    return RewardBreakdown(total=cfg.invalid_penalty, success=0.0, efficiency=0.0, structure=0.0,
                           invalid=cfg.invalid_penalty, allows_counterfactual=False)


def compute_reward(cfg: RewardConfig, *, success: float, tokens: float, n_agents: int,
                   n_edges: int) -> RewardBreakdown:
    """Score one VALID spec execution (or the mean of several worker seeds of it).

    `success` is the fraction of the spec's executions whose answer was correct (a run that produced no
    gradable answer counts as wrong); `tokens` the worker tokens one execution spends (all agents, prompt +
    completion). With `efficiency_requires_success` the bonus is paid in proportion to success, so a wrong
    spec can never buy reward by being cheap.
    """
    if not 0.0 <= success <= 1.0 or not math.isfinite(success):
        raise ValueError(f"success must be a fraction in [0, 1], got {success}")
    if tokens < 0 or n_agents < 1 or n_edges < 0:
        raise ValueError(f"bad run measurements: tokens={tokens}, agents={n_agents}, edges={n_edges}")
    earned = cfg.success_weight * success
    bonus = cfg.efficiency_coef * max(0.0, 1.0 - tokens / cfg.token_ref)
    efficiency = bonus * success if cfg.efficiency_requires_success else bonus
    structure = cfg.agent_cost * n_agents + cfg.edge_cost * n_edges
    total = earned + efficiency - structure
    if not math.isfinite(total):
        raise ValueError(f"non-finite reward {total}")
    return RewardBreakdown(total=total, success=earned, efficiency=efficiency, structure=structure,
                           invalid=0.0, allows_counterfactual=True)
