"""Uncertain training tasks: one agent's measured success under several worker seeds, mid-range kept."""

from __future__ import annotations

import pytest

from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.spec.roles import RoleLibrary
from lemon.train.curriculum import uncertain_tasks
from lemon.train.tasks import TrainTask
from tests.pools import pool_of


def reply(req: ChatRequest) -> str:
    """Test double: 'always' tasks are solved, 'never' ones are not, 'coin' ones depend on the worker seed."""
    text = req.messages[-1].content
    if "always" in text or ("coin" in text and (req.params.seed or 0) % 2):
        return "The answer is 42."
    return "The answer is 7."


def _task(name: str) -> TrainTask:
    return TrainTask(id=name, prompt=f"{name}: what is 6 * 7?", grade=lambda t: "42" in t)


async def test_only_tasks_with_mixed_outcomes_are_kept_and_rates_are_recorded() -> None:
    levels = ("small", "large")
    pool = pool_of({lv: ScriptedBackend(f"m-{lv}", responder=reply) for lv in levels},
                   defaults=GenParams(max_tokens=32, temperature=0.7))
    tasks = [_task("always"), _task("never"), _task("coin")]
    kept, u = await uncertain_tasks(tasks, Executor(pool, RoleLibrary.load()), samples=8)
    assert [t.id for t in kept] == ["coin"]
    assert u.rates["always"] == 1.0 and u.rates["never"] == 0.0 and 0.0 < u.rates["coin"] < 1.0
    assert u.level == "large" and (u.low, u.high) == (1 / 8, 7 / 8)
    with pytest.raises(ValueError):
        await uncertain_tasks(tasks, Executor(pool, RoleLibrary.load()), samples=1)
