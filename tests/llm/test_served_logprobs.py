"""A logprob gate on a served pool: `lemon serve`'s llama-server gives each reply's token log-probabilities with
the reply, so the gate runs there with no scoring pass and no second model, and takes exactly the voter its rule
takes on those scores; a pool whose server gives none (llama_cpp.server) is refused in one line before any call.

Why not the same draws as the embedded level: llama-server and llama-cpp-python reach the logits by different
code, and even greedy replies part within a few tokens (seen here: at the 6th and the 25th token), so a served
and an embedded run never share draws to compare. What is shared is the decision function: given the replies'
answers and scores, the gate's (and the learned rule's: tests/runtime/test_learned_stop.py) decisions are pure."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from lemon.llm.base import can_score
from lemon.llm.pools import load_pool, read_pool_config
from lemon.llm.serve import serving
from lemon.runtime import Executor
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.roles import RoleLibrary
from tests.llm.servers import built_llama_server, free_port

pytestmark = [pytest.mark.models, pytest.mark.server]

TASK = "Tom has 3 apples and buys 4 more. How many apples does he have?"


def gate_team(threshold: int) -> Spec:
    voters = tuple(Agent(name=f"v{i}", role="math_solver", duty=f"Solve it, way {i}.", capacity="small")
                   for i in range(3))
    vote = Agent(name="vote", role="majority_vote", capacity="small", depends_on=tuple(v.name for v in voters),
                 stop=StopRule(logprob=threshold))
    return Spec(agents=(*voters, vote), output="vote")


async def _run(pool_ref: str, spec: Spec) -> object:
    pool = load_pool(pool_ref, cache=False)
    try:
        executor = Executor(pool, RoleLibrary.load(), params=pool.params(temperature=0.7, max_tokens=40))
        return await executor.run(spec, TASK, seed=3)
    finally:
        await pool.aclose()


def test_the_gate_reads_the_served_log_probabilities_and_takes_the_voter_its_rule_takes(
        tmp_path: Path, _isolated_home: Path) -> None:
    with serving("tiny", tmp_path / "w", port=free_port(), binary=built_llama_server()) as pool_file:
        assert all(lv.logprobs for lv in read_pool_config(str(pool_file)).levels)
        assert can_score(load_pool(str(pool_file), cache=False).backend("small"))
        probe = asyncio.run(_run(str(pool_file), gate_team(-1)))  # no reply is that sure: all run, all scored
        scores = probe.early_stops[0]["scores"]  # type: ignore[attr-defined]
        assert set(scores) == {"v0", "v1", "v2"} and all(math.isfinite(s) and s < 0 for s in scores.values())
        threshold = math.floor(max(scores.values()))  # the surest voter passes; who passes first is the rule's
        gated = asyncio.run(_run(str(pool_file), gate_team(threshold)))
        sure = next(v for v in ("v0", "v1", "v2") if scores[v] >= threshold)
        stop = gated.early_stops[0]  # type: ignore[attr-defined]
        assert stop["sure"] == sure and stop["ran"] == ["v0", "v1", "v2"][:int(sure[1]) + 1]
        assert gated.outputs[sure] == probe.outputs[sure]  # type: ignore[attr-defined]


def test_a_server_without_log_probabilities_is_refused_before_any_call(tmp_path: Path,
                                                                       _isolated_home: Path) -> None:
    with serving("tiny", tmp_path / "w", port=free_port()) as pool_file:  # llama_cpp.server: none
        result = asyncio.run(_run(str(pool_file), gate_team(-20)))
    assert result.status == "error" and result.calls == 0  # type: ignore[attr-defined]
    assert "gives none" in result.stop_reason and "\n" not in result.stop_reason  # type: ignore[attr-defined]
