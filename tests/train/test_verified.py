"""Execution-verified SFT targets: the best candidate that was right under every worker seed, else nothing."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.train

from lemon.llm.base import ChatRequest, GenParams  # noqa: E402
from lemon.llm.scripted import ScriptedBackend  # noqa: E402
from lemon.runtime import Executor  # noqa: E402
from lemon.spec.roles import RoleLibrary  # noqa: E402
from lemon.train.config import RewardConfig  # noqa: E402
from lemon.train.tasks import TrainTask  # noqa: E402
from lemon.train.verified import candidate_specs, verified_targets  # noqa: E402
from tests.pools import LEVELS, pool_of  # noqa: E402


def _executor(right_levels: set[str]) -> Executor:
    """Test double workers: a level in `right_levels` answers 42, every other answers 7."""
    def at(level: str):  # type: ignore[no-untyped-def]
        def reply(req: ChatRequest) -> str:
            return "The answer is 42." if level in right_levels else "The answer is 7."
        return reply

    pool = pool_of({lv: ScriptedBackend(f"m-{lv}", responder=at(lv)) for lv in LEVELS},
                   defaults=GenParams(max_tokens=64, temperature=0.7))
    return Executor(pool, RoleLibrary.load())


TASK = TrainTask(id="t/1", prompt="What is 6 * 7?", grade=lambda text: "42" in text,
                 vote_key=lambda text: "42" if "42" in text else "7")


def test_candidates_are_the_default_team_and_baselines_at_every_level() -> None:
    labels = [label for label, _ in candidate_specs("number", RoleLibrary.load(), LEVELS)]
    assert labels[0] == "template" and {"cot@small", "cot@large", "sc-cot@medium", "chain@large"} <= set(labels)


async def test_the_cheapest_always_right_team_wins_and_hopeless_tasks_give_nothing() -> None:
    targets, won = await verified_targets([TASK], _executor({"medium"}), reward=RewardConfig())
    ((task, label, spec),) = targets
    assert task is TASK and {a.capacity for a in spec.agents} == {"medium"}
    assert label == "vanilla@medium"  # one agent, fewest tokens: the reward's tie-breakers pick it
    none, won = await verified_targets([TASK], _executor(set()), reward=RewardConfig())
    assert none == [] and won == {"none right": 1}
