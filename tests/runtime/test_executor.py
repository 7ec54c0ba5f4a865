"""The DAG executor with the scripted test double: parallelism, data flow, node cache, budgets, traces."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from lemon.errors import BackendError
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.pool import Pool
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Budget, Executor, NodeCache
from lemon.spec.edits import FAMILIES, applicable_edits, apply_edit
from lemon.spec.model import Agent, Spec
from lemon.spec.roles import RoleLibrary
from tests.pools import LEVELS, CountingBackend, pool_of, scripted_pool
from tests.runtime.specs import SIX, fan_out

ROLES = RoleLibrary.load()


def pool(backend: ScriptedBackend, concurrency: int = 16) -> Pool:
    return scripted_pool(backend, concurrency=concurrency)


def three_models() -> Pool:
    """A pool whose levels are different models (as in `cpu`), so a capacity edit changes the request."""
    return pool_of({n: ScriptedBackend(f"model-{n}") for n in LEVELS}, concurrency=16, name="scripted3")


def calls(p: Pool) -> int:
    return sum(len(lv.backend.calls) for lv in p.levels)  # type: ignore[attr-defined]


async def test_independent_agents_run_concurrently() -> None:
    backend = CountingBackend(latency_s=0.05)  # a behaviour, not a wall-clock bound: it cannot flake on a busy machine
    result = await Executor(pool(backend), ROLES).run(fan_out(8), "task")
    assert result.status == "ok" and result.calls == 9
    assert backend.max_in_flight == 8, f"only {backend.max_in_flight} of 8 independent workers ran at once"


async def test_children_start_when_their_own_parents_finish_not_by_level() -> None:
    # slow -> a ; fast -> b -> c. c must not wait for the slow branch.
    def reply(req: ChatRequest) -> str:
        return "x"

    class Timed(ScriptedBackend):
        async def complete(self, request: ChatRequest):  # type: ignore[no-untyped-def]
            if "SLOW" in request.messages[0].content:
                await asyncio.sleep(0.3)
            return await super().complete(request)

    b = Timed(responder=reply)
    events: list[dict] = []
    spec = Spec(agents=(
        Agent(name="slow", role="generalist", duty="SLOW", capacity="small"),
        Agent(name="fast", role="generalist", duty="fast", capacity="small"),
        Agent(name="b", role="generalist", duty="b", capacity="small", depends_on=("fast",)),
        Agent(name="c", role="generalist", duty="c", capacity="small", depends_on=("b",)),
        Agent(name="out", role="generalist", duty="out", capacity="small", depends_on=("slow", "c")),
    ), output="out")
    result = await Executor(pool(b), ROLES, on_event=events.append).run(spec, "t")
    t = {(e["type"], e["agent"]): e["t"] for e in events}
    assert result.status == "ok"
    assert t[("return", "c")] < t[("return", "slow")]


async def test_parents_outputs_reach_children_labelled_by_name() -> None:
    b = ScriptedBackend(responder=lambda req: f"OUT<{req.messages[0].content[-8:]}>")
    result = await Executor(pool(b), ROLES).run(SIX, "What is 6*7?")
    check_prompt = next(r for r in b.calls if "Check both." in r.messages[0].content).messages[1].content
    assert "--- solve (math_solver) ---" in check_prompt and "--- alt (math_solver) ---" in check_prompt
    assert result.outputs["solve"] in check_prompt and "What is 6*7?" in check_prompt
    assert result.answer == result.outputs["final"]


async def test_rerun_of_same_spec_is_served_entirely_from_node_cache() -> None:
    b = ScriptedBackend()
    ex = Executor(pool(b), ROLES, node_cache=NodeCache())
    first = await ex.run(SIX, "t")
    second = await ex.run(SIX, "t")
    assert first.calls == 6 and second.calls == 0 and second.cache_hits == 6
    assert second.answer == first.answer and second.total_tokens == first.total_tokens
    assert second.spent_tokens == 0


@pytest.mark.parametrize("family", FAMILIES)
async def test_counterfactual_rerun_recomputes_only_the_edited_agent_and_descendants(family: str) -> None:
    cache = NodeCache()
    ex = Executor(three_models(), ROLES, node_cache=cache)
    await ex.run(SIX, "t")
    refs = applicable_edits(SIX, family, LEVELS)  # type: ignore[arg-type]
    assert refs
    for ref in refs:
        edit = apply_edit(SIX, ref, LEVELS)
        result = await ex.run(edit.spec, "t")
        expected = 1 + len(SIX.descendants(ref.agent))
        assert result.calls <= expected  # descendants may coincide with an earlier edit's re-run
        fresh = await Executor(three_models(), ROLES, node_cache=cache).run(edit.spec, "t")
        assert fresh.calls == 0  # everything is now cached


async def test_counterfactual_calls_exactly_match_affected_agents_on_a_fresh_cache() -> None:
    for family in FAMILIES:
        for ref in applicable_edits(SIX, family, LEVELS):  # type: ignore[arg-type]
            cache = NodeCache()
            p = three_models()
            ex = Executor(p, ROLES, node_cache=cache)
            await ex.run(SIX, "t")
            before = calls(p)
            result = await ex.run(apply_edit(SIX, ref, LEVELS).spec, "t")
            assert result.calls == calls(p) - before == 1 + len(SIX.descendants(ref.agent)), ref


async def test_identical_greedy_agents_cost_one_call() -> None:
    spec = Spec(agents=(
        Agent(name="a1", role="math_solver", capacity="small"),
        Agent(name="a2", role="math_solver", capacity="small"),
        Agent(name="v", role="majority_vote", capacity="small", depends_on=("a1", "a2")),
    ), output="v")
    b = ScriptedBackend(latency_s=0.01)
    result = await Executor(pool(b), ROLES).run(spec, "t")
    assert len(b.calls) == 1 and result.cache_hits == 1
    assert result.tokens_by_agent["v"]["prompt"] == 0  # the vote is not a model call


async def test_sampled_agents_get_distinct_stable_seeds_and_vote_picks_the_majority() -> None:
    answers = iter(["The answer is 4.", "The answer is 5.", "The answer is 4."])
    b = ScriptedBackend(responder=lambda req: next(answers))
    spec = Spec(agents=(
        *(Agent(name=f"c{i}", role="math_solver", capacity="small") for i in range(3)),
        Agent(name="vote", role="majority_vote", capacity="small", depends_on=("c0", "c1", "c2")),
    ), output="vote")
    ex = Executor(pool(b, concurrency=1), ROLES, params=GenParams(temperature=0.7))
    result = await ex.run(spec, "2+2?", vote_key=lambda t: t.rsplit(" ", 1)[-1])
    seeds = {r.params.seed for r in b.calls}
    assert len(seeds) == 3 and None not in seeds
    assert result.answer == "The answer is 4."


async def test_budget_exceeded_stops_with_partial_trace() -> None:
    b = ScriptedBackend(responder=lambda req: "word " * 50)
    # Room for some agents' worst cases (prompt bound + max_tokens), not for all six (they cost 982 uncapped).
    result = await Executor(pool(b), ROLES, budget=Budget(max_tokens=1000)).run(SIX, "t")
    assert result.status == "budget_exceeded" and "budget" in result.stop_reason
    assert result.answer == ""
    stop = result.trace.events[-1]
    assert stop["type"] == "stop" and stop["reason"] == "budget"
    assert any(e["type"] == "return" for e in result.trace.events)  # partial work kept
    assert result.outputs  # and the outputs already produced
    assert result.charged_tokens <= 1000 and result.budget_scope == "run"


async def test_call_timeout_stops_the_run() -> None:
    b = ScriptedBackend(latency_s=3600.0)  # without the timeout this test could not end
    result = await Executor(pool(b), ROLES, budget=Budget(call_timeout_s=0.05)).run(SIX, "t")
    assert result.status == "timeout" and not result.outputs and "took longer than 0.05s" in result.stop_reason
    assert result.trace.events[-1]["reason"] == "timeout"


async def test_backend_error_becomes_status_error_not_an_exception() -> None:
    def boom(req: ChatRequest) -> str:
        raise BackendError("endpoint http://127.0.0.1:9 cannot be reached")

    result = await Executor(pool(ScriptedBackend(responder=boom)), ROLES).run(SIX, "t")
    assert result.status == "error" and "cannot be reached" in result.stop_reason


async def test_agents_that_cannot_reach_the_output_are_not_run() -> None:
    spec = Spec(agents=(
        Agent(name="a", role="generalist", capacity="small"),
        Agent(name="orphan", role="generalist", duty="unused", capacity="small"),
    ), output="a")
    b = ScriptedBackend()
    result = await Executor(pool(b), ROLES).run(spec, "t")
    assert len(b.calls) == 1 and result.skipped == ("orphan",)
    assert any(e["type"] == "despawn" and e["agent"] == "orphan" for e in result.trace.events)


async def test_trace_follows_the_schema_and_saves_as_json(tmp_path: Path) -> None:
    result = await Executor(pool(ScriptedBackend()), ROLES).run(SIX, "t", task_id="demo/1",
                                                               orchestrator={"source": "model"})
    data = json.loads(result.trace.save(tmp_path / "t.json").read_text())
    assert {"trace_id", "task_id", "events", "edges", "rewards", "costs"} <= data.keys()
    types = [e["type"] for e in data["events"]]
    assert types[0] == "orchestrator_decision" and types[-1] == "stop" and "aggregate" in types
    assert types.count("spawn") == 6 and types.count("return") == 6
    assert types.count("message") == sum(len(a.depends_on) for a in SIX.agents)
    ids = {e["id"] for e in data["events"]}
    assert all(e["src"] in ids and e["dst"] in ids for e in data["edges"])
    assert data["costs"]["tokens"] == result.total_tokens > 0
    assert set(data["contents"]) == set(SIX.names)
    times = [e["t"] for e in data["events"]]
    assert times == sorted(times)
