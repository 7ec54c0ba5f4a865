"""Each training task's workers get the reply limit `lemon eval` gives its benchmark (AQuA 1,024, GSM8K the
pool's), unless the training config sets one limit for the whole mixture."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.pool import Pool
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.runtime.node_cache import NodeCache
from lemon.spec.model import Agent, Spec
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.config import RewardConfig, TrainConfig
from lemon.train.rollout import RolloutSettings, rollout_group
from lemon.train.sampler import AdaptiveFamilySampler
from lemon.train.tasks import TrainTask, load_train_tasks
from lemon.train.workers import worker_executor, worker_tasks
from tests.pools import LEVELS, pool_of

SOLO = Spec(agents=(Agent(name="solver", role="math_solver", capacity="large"),), output="solver")


def _pool() -> tuple[Pool, dict[str, ScriptedBackend]]:
    backends = {lv: ScriptedBackend(f"model-{lv}", responder=lambda _req: "The answer is 42") for lv in LEVELS}
    return pool_of(backends, defaults=GenParams(max_tokens=64)), backends


def _sent(backends: dict[str, ScriptedBackend]) -> list[int]:
    requests: list[ChatRequest] = [r for b in backends.values() for r in b.calls]
    return [r.params.max_tokens for r in requests]


async def _rollout(executor: Executor, task: TrainTask) -> None:
    settings = RolloutSettings(reward=RewardConfig(), cf_enabled=False)
    sampler = AdaptiveFamilySampler(("edge",), floor=0.1, seed=0)
    await rollout_group(executor, task, [render_spec(SOLO).text], roles=RoleLibrary.load(), settings=settings,
                        sampler=sampler, rng=random.Random(0))


def test_a_mixture_carries_each_benchmarks_reply_limit(data_dir: Path) -> None:
    _, tasks = load_train_tasks("gsm8k,aqua,mmlu", limit=2, data_dir=data_dir)
    limits = {t.id.split("/")[0]: t.reply_tokens for t in tasks}
    assert limits == {"gsm8k": None, "aqua": 1024, "mmlu": 1024}


@pytest.mark.parametrize(("configured", "expected"), [(None, [1024, 64]), (500, [500, 500])])
async def test_rollouts_run_at_the_task_limit_unless_the_config_sets_one(configured: int | None,
                                                                          expected: list[int]) -> None:
    cfg = TrainConfig.model_validate({"workers": {"max_tokens": configured}})
    long_reply = TrainTask(id="aqua/1", prompt="Pick one", grade=lambda text: "42" in text, reply_tokens=1024)
    default = TrainTask(id="gsm8k/1", prompt="What is 6 * 7?", grade=lambda text: "42" in text)
    pool, backends = _pool()
    executor = worker_executor(pool, RoleLibrary.load(), cfg)
    sent: list[int] = []
    for task in worker_tasks([long_reply, default], cfg):
        await _rollout(executor, task)
        sent += _sent(backends)
        for b in backends.values():
            b.calls.clear()
    assert sent == expected


async def test_a_run_at_its_own_limit_is_recorded_and_cached_apart() -> None:
    pool, backends = _pool()
    executor, cache = Executor(pool, RoleLibrary.load()), NodeCache()
    long_run = await executor.run(SOLO, "What is 6 * 7?", node_cache=cache, max_tokens=1024)
    short_run = await executor.run(SOLO, "What is 6 * 7?", node_cache=cache)
    again = await executor.run(SOLO, "What is 6 * 7?", node_cache=cache, max_tokens=1024)
    assert _sent(backends) == [1024, 64]  # another limit is another request; the same limit is a node-cache hit
    assert [r.trace.system["max_tokens"] for r in (long_run, short_run, again)] == [1024, 64, 1024]
    with pytest.raises(ValueError, match="max_tokens must be positive"):
        await executor.run(SOLO, "x", max_tokens=0)
