"""Scalar reward of one executed spec: task success + token-efficiency bonus - graph-structure cost.

An invalid spec (does not parse or validate) gets the invalid penalty and nothing else: it never ran, so
it has no success and no cost, and it has no fields whose edits could be credited, which is why
``allows_counterfactual`` is False for it and the trainer skips counterfactuals.
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


def compute_reward(correct: bool | None, tokens: int, n_agents: int, n_edges: int, valid: bool,
                   cfg: RewardConfig) -> RewardBreakdown:
    """Score one spec execution.

    `correct` is None when the run produced no gradable answer (error, timeout, budget exceeded): it
    counts as not correct. `tokens` are the worker tokens the run spent (all agents, prompt + completion).
    """
    if not valid:
        return RewardBreakdown(total=cfg.invalid_penalty, success=0.0, efficiency=0.0, structure=0.0,
                               invalid=cfg.invalid_penalty, allows_counterfactual=False)
    if tokens < 0 or n_agents < 1 or n_edges < 0:
        raise ValueError(f"bad run measurements: tokens={tokens}, agents={n_agents}, edges={n_edges}")
    success = cfg.success_weight if correct else 0.0
    efficiency = 0.0
    if correct or not cfg.efficiency_requires_success:
        efficiency = cfg.efficiency_coef * max(0.0, 1.0 - tokens / cfg.token_ref)
    structure = cfg.agent_cost * n_agents + cfg.edge_cost * n_edges
    total = success + efficiency - structure
    if not math.isfinite(total):
        raise ValueError(f"non-finite reward {total}")
    return RewardBreakdown(total=total, success=success, efficiency=efficiency, structure=structure,
                           invalid=0.0, allows_counterfactual=True)
