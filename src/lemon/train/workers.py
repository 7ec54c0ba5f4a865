"""The executor of the worker LLMs that training runs teams with, and each task's reply limit: SFT's validation
and GRPO's rollouts share them, so a trained team is sampled exactly as `lemon eval` samples it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from lemon.llm.pool import Pool
from lemon.runtime import Budget, Executor
from lemon.spec.roles import RoleLibrary
from lemon.train.config import TrainConfig
from lemon.train.tasks import TrainTask


def worker_executor(pool: Pool, roles: RoleLibrary, cfg: TrainConfig) -> Executor:
    """The executor of training rollouts: workers sampled exactly as `lemon eval` samples them (its reply limit
    is `workers.max_tokens`, else the pool's; each task may ask for its own: `worker_tasks`)."""
    params = pool.params(temperature=cfg.workers.temperature, max_tokens=cfg.workers.max_tokens)
    return Executor(pool, roles, budget=Budget(max_tokens=cfg.rollout.worker_budget_tokens), params=params)


def worker_tasks(tasks: Sequence[TrainTask], cfg: TrainConfig) -> list[TrainTask]:
    """`tasks` with the reply limit their rollouts run at, resolved as `lemon eval` resolves it: the config's
    `workers.max_tokens` when it sets one (one limit for the whole mixture), else each task's benchmark's own
    (AQuA and MMLU 1,024, `Benchmark.reply_tokens`), else the executor's. So a mixture of GSM8K and AQuA is
    sampled at 384 and 1,024 tokens, and its banked draws are `lemon eval`'s."""
    if cfg.workers.max_tokens is None:
        return list(tasks)
    return [replace(t, reply_tokens=cfg.workers.max_tokens) for t in tasks]
