"""The executor of the worker LLMs that training runs teams with: SFT's validation and GRPO's rollouts share it,
so a trained team is sampled exactly as `lemon eval` samples it."""

from __future__ import annotations

from lemon.llm.base import GenParams
from lemon.llm.pool import Pool
from lemon.runtime import Budget, Executor
from lemon.spec.roles import RoleLibrary
from lemon.train.config import TrainConfig


def worker_executor(pool: Pool, roles: RoleLibrary, cfg: TrainConfig) -> Executor:
    """The executor of training rollouts: workers sampled exactly as `lemon eval` samples them, with one reply
    limit for the whole mixture (`workers.max_tokens`, else the pool's 384). `lemon eval` gives AQuA and MMLU
    1,024 (`Benchmark.reply_tokens`): a mixture with them sets `workers.max_tokens: 1024` to match."""
    base = {f: getattr(pool.defaults, f) for f in pool.defaults.__dataclass_fields__}
    base["temperature"] = cfg.workers.temperature
    if cfg.workers.max_tokens is not None:
        base["max_tokens"] = cfg.workers.max_tokens
    return Executor(pool, roles, budget=Budget(max_tokens=cfg.rollout.worker_budget_tokens),
                    params=GenParams(**base))
