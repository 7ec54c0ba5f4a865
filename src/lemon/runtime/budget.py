"""Run budgets: a cap on a run's worker tokens and a per-call timeout. Hitting either stops the run loudly."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Budget:
    """`max_tokens` caps the tokens (prompt + completion) of all agents of one run; None = no cap.

    Tokens of agents served from the node cache count too: a spec's budget behaviour must not depend on
    what happened to be cached.
    """

    max_tokens: int | None = None
    call_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError("budget max_tokens must be positive")
        if self.call_timeout_s is not None and self.call_timeout_s <= 0:
            raise ValueError("budget call_timeout_s must be positive")
