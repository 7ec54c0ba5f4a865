"""A train-split sample bank serves the trainer exactly: `lemon eval`'s 5-voter sc-cot on the train split, then
every banked team scored through the trainer's own rollout under `workers.seeds: bank`, on an OFFLINE pool (a
request the bank lacks is an error). Workers are the scripted test double, seeded like a sampled model."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.llm.pools import load_pool
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.batch import group_worker_seed
from lemon.train.config import RewardConfig, load_train_config
from lemon.train.rollout import RolloutSettings, score_group
from lemon.train.tasks import load_train_tasks
from lemon.train.verified import bank_candidates, bank_targets
from lemon.train.workers import worker_executor
from tests.evalcall import evaluate_kw
from tests.evaluation.test_cli import scripted_pool_yaml


def test_the_bank_mode_seed_is_evaluations_seed_0_whatever_the_run_seed() -> None:
    assert group_worker_seed(7, "svamp/x", 3, "bank", bank_seed=1234) == 1234
    assert group_worker_seed(7, "svamp/x", 3, "task", bank_seed=1234) != 1234


async def test_a_train_bank_answers_every_banked_team_of_the_trainer_offline(tmp_path: Path, data_dir: Path,
                                                                              monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    monkeypatch.setenv("LEMON_HOME", str(tmp_path / "home"))
    pool_file = str(scripted_pool_yaml(tmp_path / "pool.yaml", 0.0))
    await evaluate_kw("svamp", "sc-cot", split="train", limit=3, seeds=1, pool=pool_file, level="large",
                      n_agents=5, data_dir=data_dir, store=tmp_path / "s.sqlite")
    _, tasks = load_train_tasks("svamp", limit=3, data_dir=data_dir)
    cfg = load_train_config()
    pool = load_pool(pool_file, offline=True)
    try:
        executor = worker_executor(pool, RoleLibrary.load(), cfg)
        texts = [render_spec(s).text for _, s in bank_candidates("number", executor.roles, "large")]
        for task in tasks:
            state = await score_group(executor, task, texts, roles=executor.roles, seed=task.bank_seed,
                                      settings=RolloutSettings(reward=cfg.reward, cf_enabled=False))
            for sample in state.result.samples:
                assert sample.valid and sample.status == "ok", (sample.status, sample.error)
                assert sample.spent_tokens == 0 and sample.total_tokens > 0  # all served by the bank
        targets, won = await bank_targets(tasks, executor, reward=RewardConfig())
    finally:
        await pool.aclose()
    assert sum(won.values()) == len(tasks) and len(targets) == len(tasks) - won.get("none right", 0)
