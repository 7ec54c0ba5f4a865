"""Training tasks whose outcome is uncertain: measured by a single agent, keeping the mid-range.

Why: in the first CPU run 12 of 20 GSM8K groups failed on every spec (0.5B workers solve GSM8K ~10-20 %), so
there was no reward contrast and no gradient. GRPO learns only from groups whose specs disagree, so the
training pool is filtered by the measured success of one chain-of-thought agent (default: the pool's
strongest level) under `samples` worker seeds, sampled as in evaluation: a task every seed solves, or none
does, is dropped. The measurement runs through the trainer's own rollout scoring and the LLM cache, so
re-running (or resuming) a run gives the same tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lemon.runtime import Executor
from lemon.spec.render import render_spec
from lemon.spec.validate import validate_spec
from lemon.train.config import RewardConfig
from lemon.train.rollout import RolloutSettings, score_group
from lemon.train.tasks import TrainTask


@dataclass(frozen=True)
class Uncertainty:
    """The filter and what it measured (recorded in run.json)."""

    level: str
    samples: int
    low: float
    high: float
    rates: dict[str, float]

    def keeps(self, task_id: str) -> bool:
        return self.low <= self.rates[task_id] <= self.high


async def single_agent_success(executor: Executor, task: TrainTask, *, level: str, samples: int,
                               seed: int) -> float:
    """Fraction of `samples` worker seeds for which one CoT agent at `level` answers `task` right."""
    from lemon.evaluation.baselines import baseline_spec

    spec = validate_spec(baseline_spec("cot", task.kind, level=level), executor.roles, executor.pool.level_names)
    state = await score_group(executor, task, [render_spec(spec).text], roles=executor.roles,
                              settings=RolloutSettings(reward=RewardConfig(), cf_enabled=False,
                                                       worker_samples=samples), seed=seed)
    return state.result.samples[0].success


async def uncertain_tasks(tasks: Sequence[TrainTask], executor: Executor, *, samples: int,
                          level: str | None = None, seed: int = 0) -> tuple[list[TrainTask], Uncertainty]:
    """The tasks one agent solves under some but not all of `samples` worker seeds."""
    from lemon.seeds import stable_seed

    if samples < 2:
        raise ValueError("measuring uncertainty needs at least 2 worker samples per task")
    level = level or executor.pool.level_names[-1]
    rates = {t.id: await single_agent_success(executor, t, level=level, samples=samples,
                                              seed=stable_seed(seed, "uncertain", t.id)) for t in tasks}
    u = Uncertainty(level, samples, 1 / samples, 1 - 1 / samples, rates)
    return [t for t in tasks if u.keeps(t.id)], u
