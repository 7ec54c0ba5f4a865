"""A stop rule's `logprob` gate at run time (issue 24): a parent whose reply its model was sure of is taken alone.

The scripted test double answers voter i from a table and scores a reply from another (a stand-in for a
teacher-forced log-probability), so which parents run, which one is sure and what the vote sees is known
exactly; the LLM cache keeps scores in a table of its own, and an offline pool without them refuses."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from lemon.errors import BackendError
from lemon.llm.base import ChatRequest, Completion, can_score
from lemon.llm.cache import CachedBackend, CacheOnlyBackend, SQLiteCache
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Budget, Executor, NodeCache, RunResult
from lemon.spec.edits import apply_edit, draw_edit
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.render import FieldRef
from lemon.spec.roles import RoleLibrary
from tests.pools import LEVELS, scripted_pool

ROLES = RoleLibrary.load()
SURE, UNSURE = -2.0, -40.0


def answering(answers: list[str], scores: dict[str, float] | None = None) -> ScriptedBackend:
    """Voter i (duty "Voter i.") answers answers[i]; a reply is scored from `scores` (default: "A" and "C" are
    sure, anything else is not)."""
    table = scores if scores is not None else {"A": SURE, "C": SURE}

    def reply(request: ChatRequest) -> str:
        system = request.messages[0].content
        return next((a for i, a in enumerate(answers) if f"Voter {i}." in system), "plan")

    return ScriptedBackend("scripted", responder=reply, scorer=lambda _request, text: table.get(text, UNSURE))


def vote_team(n: int, rule: StopRule | None) -> Spec:
    voters = tuple(Agent(name=f"v{i}", role="math_solver", duty=f"Voter {i}.", capacity="large") for i in range(n))
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(v.name for v in voters),
                 stop=rule)
    return Spec(agents=(*voters, vote), output="vote")


def ran(result: RunResult) -> list[str]:
    return [e["agent"] for e in result.trace.events if e["type"] == "return" and e["agent"] != "vote"]


def stop_event(result: RunResult) -> dict[str, object]:
    (event,) = [e for e in result.trace.events if e.get("reason") == "stop_rule"]
    return dict(event)


async def _run(backend: object, rule: StopRule | None, n: int = 5, **kw: object) -> RunResult:
    return await Executor(scripted_pool(backend), ROLES, **kw).run(vote_team(n, rule), "task")  # type: ignore[arg-type]


async def test_a_sure_first_parent_stops_the_vote_at_one_parent_and_its_answer_wins() -> None:
    backend = answering(["A", "B", "B", "B", "B"])  # the full vote would say B
    result = await _run(backend, StopRule(logprob=-10, agree=2))
    assert result.status == "ok" and result.answer == "A"
    assert ran(result) == ["v0"] and result.calls == 1 and result.unrun == ("v1", "v2", "v3", "v4")
    event = stop_event(result)
    assert event["rule"] == "{logprob: -10, agree: 2}" and event["fired"] is True
    assert event["scores"] == {"v0": SURE} and event["sure"] == "v0" and event["skipped"] == ["v1", "v2", "v3", "v4"]
    assert result.early_stops[0]["sure"] == "v0" and result.early_stops[0]["scores"] == {"v0": SURE}
    messages = [e["from"] for e in result.trace.events if e["type"] == "message" and e["agent"] == "vote"]
    assert messages == ["v0"]  # the vote sees the sure parent alone
    assert [text for _, text in backend.scored] == ["A"]


async def test_an_unsure_first_parent_goes_on_to_the_agreement_criterion() -> None:
    result = await _run(answering(["B", "B", "A", "A", "A"]), StopRule(logprob=-10, agree=2))
    assert result.answer == "B" and ran(result) == ["v0", "v1"]
    event = stop_event(result)
    assert event["fired"] is True and "sure" not in event and result.early_stops[0]["sure"] is None
    assert event["scores"] == {"v0": UNSURE, "v1": UNSURE}


async def test_a_later_sure_parent_is_taken_alone_before_agreement_is_checked() -> None:
    result = await _run(answering(["B", "D", "C", "B", "B"]), StopRule(logprob=-10, agree=2))
    assert ran(result) == ["v0", "v1", "v2"] and result.answer == "C" and stop_event(result)["sure"] == "v2"


async def test_a_gate_alone_runs_to_max_then_the_majority_of_those_run() -> None:
    result = await _run(answering(["B", "D", "D", "B", "D", "A"]), StopRule(logprob=-10, max=4), n=6)
    assert ran(result) == ["v0", "v1", "v2", "v3"] and result.unrun == ("v4", "v5")
    assert result.answer == "B"  # a 2-2 tie of those run goes to the first parent's answer
    event = stop_event(result)
    assert event["fired"] is False and event["scores"] == {f"v{i}": UNSURE for i in range(4)}


async def test_a_gate_alone_stops_at_the_first_sure_parent_of_a_wave() -> None:
    result = await _run(answering(["B", "D", "A", "C", "B"]), StopRule(logprob=-10, wave=2))
    # first wave: v0 (unsure); then v1, v2 together: v2 is sure, so v3 and v4 never run
    assert ran(result) == ["v0", "v1", "v2"] and result.answer == "A"
    assert stop_event(result)["scores"] == {"v0": UNSURE, "v1": UNSURE, "v2": SURE}


async def test_scoring_adds_no_tokens_and_changes_no_worker_request() -> None:
    gated, plain = answering(["B", "B", "A"]), answering(["B", "B", "A"])
    a = await _run(gated, StopRule(logprob=-10, agree=2), n=3, budget=Budget(max_tokens=10_000))
    b = await _run(plain, StopRule(agree=2), n=3, budget=Budget(max_tokens=10_000))
    assert a.answer == b.answer == "B" and ran(a) == ran(b) == ["v0", "v1"]
    assert gated.calls == plain.calls  # byte-identical requests: the sample bank's keys do not move
    assert a.total_tokens == b.total_tokens and a.charged_tokens == b.charged_tokens
    assert a.spent_tokens == b.spent_tokens and len(gated.scored) == 2


async def test_the_second_run_and_a_counterfactual_re_run_hit_the_score_cache(tmp_path: Path) -> None:
    inner = answering(["B", "B", "C", "B", "B"])
    cached = CachedBackend(inner, SQLiteCache(tmp_path / "llm.sqlite"))
    first = await _run(cached, StopRule(logprob=-10, agree=3))
    assert ran(first) == ["v0", "v1", "v2"] and first.answer == "C" and len(inner.scored) == 3
    again = await _run(cached, StopRule(logprob=-10, agree=3))
    assert stop_event(again)["scores"] == stop_event(first)["scores"] and cached.score_hits == 3
    assert len(inner.scored) == 3 and len(inner.calls) == 3  # nothing asked of the model the second time
    # a counterfactual edit of the gate (-10 -> -5 is drawn among the variants) reruns from the caches
    spec = vote_team(5, StopRule(logprob=-10, agree=3))
    drawn = (draw_edit(spec, "stop", FieldRef("stop", "vote"), LEVELS, random.Random(s)).spec for s in range(50))
    edited = next(e for e in drawn if e.agent("vote").stop == StopRule(logprob=-5, agree=3))
    node_cache = NodeCache()
    ex = Executor(scripted_pool(cached), ROLES, node_cache=node_cache)
    await ex.run(spec, "task")
    rerun = await ex.run(edited, "task")
    assert rerun.answer == "C" and rerun.cache_hits == 3 and rerun.calls == 0
    # the rerun's unchanged parents come from the node cache with their replies' log-probabilities: 3 scores
    # per run served by the LLM cache (the second run's and the original's), none asked of the model again
    assert len(inner.scored) == 3 and cached.score_hits == 6


async def test_an_old_cache_file_gains_the_scores_table_and_keeps_its_completions(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:  # a cache file as versions before the gate wrote it
        conn.execute("CREATE TABLE completions (key TEXT PRIMARY KEY, model TEXT NOT NULL, text TEXT NOT NULL, "
                     "prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, created REAL NOT NULL)")
        conn.execute("INSERT INTO completions VALUES ('k', 'm', 'old text', 1, 2, 0.0)")
    cache = SQLiteCache(path)
    assert cache.get("k") == ("old text", 1, 2) and cache.get_score("nothing") is None
    cache.put_score("s", "m", -3.5)
    assert cache.get_score("s") == -3.5
    cache.close()


async def test_an_offline_pool_without_the_score_is_a_run_error_naming_the_bank(tmp_path: Path) -> None:
    sqlite = SQLiteCache(tmp_path / "bank.sqlite")
    banked = await _run(CachedBackend(answering(["B", "B", "A"]), sqlite), None, n=3)  # the bank: no scores
    assert banked.status == "ok"
    offline = CachedBackend(CacheOnlyBackend("scripted"), sqlite)
    result = await _run(offline, StopRule(logprob=-10, agree=2), n=3)
    assert result.status == "error" and "\n" not in result.stop_reason
    assert "scoring agent 'v0' (large) for the stop rule of 'vote'" in result.stop_reason
    assert "score is not in the LLM cache" in result.stop_reason and "bank" in result.stop_reason
    live = await _run(CachedBackend(answering(["B", "B", "A"]), sqlite), StopRule(logprob=-10, agree=2), n=3)
    replay = await _run(offline, StopRule(logprob=-10, agree=2), n=3)  # scores banked by the live run
    assert replay.status == "ok" and (replay.answer, ran(replay)) == (live.answer, ran(live))
    assert stop_event(replay)["scores"] == stop_event(live)["scores"]


class CompletesOnly:
    """A Backend that is not a Scorer (as an OpenAI-compatible endpoint is not)."""

    def __init__(self) -> None:
        self.inner = answering(["B", "B", "A"])

    @property
    def model_id(self) -> str:
        return "openai:remote"

    async def complete(self, request: ChatRequest) -> Completion:
        return await self.inner.complete(request)

    async def prepare(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("cached", [False, True])
async def test_a_level_that_cannot_score_is_a_one_line_error_before_any_call(tmp_path: Path, cached: bool) -> None:
    backend: object = CompletesOnly()
    if cached:
        backend = CachedBackend(backend, SQLiteCache(tmp_path / "c.sqlite"))  # type: ignore[arg-type]
    assert not can_score(backend)
    result = await _run(backend, StopRule(logprob=-10, agree=2), n=3)
    assert result.status == "error" and result.calls == 0 and "\n" not in result.stop_reason
    assert result.stop_reason == (
        "agent 'vote', field stop: its logprob gate reads each parent's reply log-probability, and level "
        "'large' (openai:remote) gives none (an embedded llama.cpp model does, and an OpenAI-compatible level "
        "whose server returns them, marked `logprobs: true` in the pool); serve that level so, or remove "
        "logprob from the rule")
    without_gate = await _run(backend, StopRule(agree=2), n=3)
    assert without_gate.status == "ok"


async def test_a_failed_score_stops_the_run_like_a_failed_call() -> None:
    def broken(_request: ChatRequest, _text: str) -> float:
        raise BackendError("scripted: cannot score today")

    backend = ScriptedBackend("scripted", responder=lambda r: "B", scorer=broken)
    result = await _run(backend, StopRule(logprob=-10, agree=2), n=3)
    assert result.status == "error"
    assert result.stop_reason == ("scoring agent 'v0' (large) for the stop rule of 'vote': scripted: cannot "
                                  "score today")


class SlowScorer(ScriptedBackend):
    async def score(self, request: ChatRequest, reply: str) -> float:
        await asyncio.sleep(5)
        return await super().score(request, reply)


async def test_a_slow_score_times_out_under_the_call_timeout() -> None:
    result = await _run(SlowScorer("scripted", responder=lambda r: "B"), StopRule(logprob=-10, agree=2), n=3,
                        budget=Budget(call_timeout_s=0.2))
    assert result.status == "timeout"
    assert result.stop_reason == "scoring agent 'v0' (large) for the stop rule of 'vote' took longer than 0.2s"


def test_the_deterministic_stop_edit_still_removes_a_gated_rule() -> None:
    edit = apply_edit(vote_team(3, StopRule(logprob=-10)), FieldRef("stop", "vote"), LEVELS)
    assert edit.spec.agent("vote").stop is None
