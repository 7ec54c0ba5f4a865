"""Rollout time of a GRPO group of vote and stop-rule teams: served from the sample bank / computed live.

Issue 24 asks that rollouts get cheap on 2 cores. An agent's sample depends on its role and rank, not its team
(`runtime.executor.sample_slot`), so once the largest vote of a task has run, every vote or stop-rule team over
its voters is in the LLM request cache. This runs the trainer's own phase-1 rollout (`rollout.score_group`:
strict parse, execution through a group node cache, reward) on the same tasks and the same group of specs
twice: LIVE on the real `tiny` pool (SmolLM2-135M through llama.cpp, sampled, an empty LLM cache that the pass
fills), then from the BANK (the same pool offline: every answer from the cache, `load_pool(offline=True)`).
Both passes must give the same rewards (the bank is exact); the ratio is the step's execution time.

Prints:
    B1 <ratio>  rollout seconds per group from the bank / live (lower is better)
    B1-live <s>  B1-bank <s>  seconds per group, and whether the rewards agreed
Run: `python benchmarks/bench_bank.py [--tasks 3] [--data-dir DIR]` (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from lemon.errors import run_script
from lemon.evaluation.baselines import baseline_spec
from lemon.llm.pools import load_pool
from lemon.runtime import Executor
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.config import RewardConfig
from lemon.train.rollout import RolloutSettings, score_group
from lemon.train.tasks import TrainTask, load_train_tasks

MAX_TOKENS = 96
GROUP = (("sc-cot", 5), ("esc", 5), ("asc", 5), ("sc-cot", 3), ("cot", None))


def group_texts() -> list[str]:
    """The group's completions: canonical texts of vote and stop-rule teams at `small` (a warm policy's)."""
    return [render_spec(baseline_spec(m, "number", level="small", n=n)).text for m, n in GROUP]


async def rollout_seconds(tasks: list[TrainTask], cache: Path, *, offline: bool) -> tuple[float, list[float]]:
    """(seconds per group, every sample's reward) of phase 1 on `tasks`."""
    pool = load_pool("tiny", cache_path=cache, offline=offline)
    roles = RoleLibrary.load()
    executor = Executor(pool, roles, params=pool.params(temperature=0.7, max_tokens=MAX_TOKENS))
    settings = RolloutSettings(reward=RewardConfig(), cf_enabled=False)
    rewards: list[float] = []
    start = time.perf_counter()
    for i, task in enumerate(tasks):
        state = await score_group(executor, task, group_texts(), roles=roles, settings=settings, seed=i)
        rewards += [s.total_reward for s in state.result.samples]
    elapsed = time.perf_counter() - start
    await pool.aclose()
    return elapsed / len(tasks), rewards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=3)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    _, tasks = load_train_tasks("gsm8k", limit=args.tasks, data_dir=args.data_dir)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "bank.sqlite"
        live, live_rewards = asyncio.run(rollout_seconds(tasks, cache, offline=False))
        bank, bank_rewards = asyncio.run(rollout_seconds(tasks, cache, offline=True))
    same = "rewards identical" if live_rewards == bank_rewards else "REWARDS DIFFER"
    print(f"B1 {bank / live:.4f}  rollout seconds per group from the sample bank / live, lower is better")
    print(f"B1-live {live:.1f} s  B1-bank {bank:.3f} s  per group of {len(GROUP)} teams, {same}")


if __name__ == "__main__":
    run_script(main)
