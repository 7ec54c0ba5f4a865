"""Draw orders: a run may take a role's banked draws in another order (`runtime.executor.sample_slot`), so the
trainer can re-run a team over a sample bank's draws at no worker call. Workers are a seeded test double."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lemon.evaluation.baselines import baseline_spec
from lemon.extract import extract_number
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.runtime.executor import check_draw_order, derive_seed, sample_slot
from lemon.spec.roles import RoleLibrary
from tests.pools import scripted_pool

FIVE = baseline_spec("sc-cot", "number", level="large", n=5)
COT = baseline_spec("cot", "number", level="large")


def _draw_double(seed: int) -> ScriptedBackend:
    """Voter k's draw (its seed, derived from slot `role#k`) answers k: which draw ran is in the answer."""
    role = FIVE.agents[0].role
    draw_of = {derive_seed(seed, f"{role}#{k}"): k for k in range(8)}

    def reply(request: ChatRequest) -> str:
        return f"The answer is {draw_of.get(request.params.seed or -1, 99)}."

    return ScriptedBackend("draws", responder=reply)


def _executor(seed: int) -> Executor:
    pool = scripted_pool(_draw_double(seed), defaults=GenParams(temperature=0.7, max_tokens=32))
    return Executor(pool, RoleLibrary.load())


async def test_a_draw_order_sends_the_first_voter_to_another_banked_draw() -> None:
    executor = _executor(5)
    plain = await executor.run(COT, "q", seed=5, vote_key=extract_number)
    moved = await executor.run(COT, "q", seed=5, vote_key=extract_number, draw_order=(3, 0, 1, 2, 4))
    assert extract_number(plain.answer) == "0" and extract_number(moved.answer) == "3"
    assert moved.trace.system["draw_order"] == [3, 0, 1, 2, 4] and "draw_order" not in plain.trace.system
    # the moved voter's request is the 5-vote's fourth voter's: a sample-bank hit, not a new draw
    five = FIVE.model_copy(update={"output": FIVE.agents[3].name})
    fourth = await executor.run(five, "q", seed=5, vote_key=extract_number)
    assert fourth.answer == moved.answer


async def test_ranks_beyond_the_order_keep_their_own_draw() -> None:
    order = (1, 0)
    slots = [sample_slot(FIVE, a.name, order) for a in FIVE.agents[:-1]]
    role = FIVE.agents[0].role
    assert slots == [f"{role}#1", f"{role}#0", f"{role}#2", f"{role}#3", f"{role}#4"]


@given(st.permutations(list(range(5))))
def test_a_draw_order_is_a_bijection_on_the_voters_slots(order: list[int]) -> None:
    slots = [sample_slot(FIVE, a.name, order) for a in FIVE.agents[:-1]]
    assert sorted(slots) == sorted(sample_slot(FIVE, a.name) for a in FIVE.agents[:-1])


@pytest.mark.parametrize("bad", [(0, 0), (1, 2), (-1, 0)])
async def test_an_order_that_is_not_a_permutation_is_refused(bad: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="permutation"):
        check_draw_order(bad)
    with pytest.raises(ValueError, match="permutation"):
        await _executor(0).run(COT, "q", seed=0, draw_order=bad)
