"""What `lemon trace`, the exports and `lemon explain` say about one run is true (issue 23, point 2): an LLM-cache
hit is a cache hit everywhere, latency is model time apart from queueing, a vote shows its tally, an item
without an extracted answer is not "ok", and a stop rule's early stop is shown with the agents it left unrun."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from pathlib import Path

from rich.console import Console

from lemon.cli.view_cmds import render_item
from lemon.extract import extract_number
from lemon.inspection.explain import explain_spec
from lemon.inspection.export_otel import build_spans
from lemon.inspection.export_table import results_csv
from lemon.inspection.itemview import agent_records, item_payload
from lemon.inspection.tracefile import read_trace, trace_store
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.cache import CachedBackend, SQLiteCache
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.runtime.trace import Trace
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.roles import RoleLibrary
from tests.pools import scripted_pool

ROLES = RoleLibrary.load()
TASK = "What is 2 + 3?"
SEEDED = GenParams(temperature=0.7, max_tokens=64)  # sampled with a seed: deterministic, so the LLM cache keeps it


def _voters(answers: list[str], latency_s: float = 0.0) -> ScriptedBackend:
    """Voter i (duty "Voter i.") answers answers[i]."""
    def reply(request: ChatRequest) -> str:
        system = request.messages[0].content
        return next((a for i, a in enumerate(answers) if f"Voter {i}." in system), "I do not know.")
    return ScriptedBackend("scripted", latency_s=latency_s, responder=reply)


def _team(n: int, rule: StopRule | None = None) -> Spec:
    voters = tuple(Agent(name=f"v{i}", role="math_solver", duty=f"Voter {i}.", capacity="large") for i in range(n))
    return Spec(agents=(*voters, Agent(name="vote", role="majority_vote", capacity="large",
                                       depends_on=tuple(v.name for v in voters), stop=rule)), output="vote")


def _run(backend: object, spec: Spec, folder: Path, *, concurrency: int = 64) -> Path:
    """Run `spec` on TASK and save its trace as `lemon run` does; returns the trace file."""
    pool = scripted_pool(backend, concurrency=concurrency)  # type: ignore[arg-type]
    result = asyncio.run(Executor(pool, ROLES, params=SEEDED).run(spec, TASK, vote_key=extract_number))
    assert result.status == "ok", result.stop_reason
    return result.trace.save(folder / f"trace-{result.trace.trace_id}.json")


def _payload(path: Path) -> dict:  # type: ignore[type-arg]
    db, run = trace_store(path)
    with db:
        (row,) = db.items(run.run_id)
        return item_payload(run, row, db.trace(run.run_id, row.item_id, row.seed))


def _shown(payload: dict) -> str:  # type: ignore[type-arg]
    console = Console(record=True, width=240)
    console.print(render_item(payload, Trace.from_json(payload["trace"])))
    return " ".join(console.export_text().split())


def test_an_llm_cache_hit_is_a_cache_hit_everywhere(tmp_path: Path) -> None:
    cache = SQLiteCache(tmp_path / "llm-cache.sqlite")
    answers = ["The answer is 5.", "The answer is 5.", "The answer is 6."]
    _run(CachedBackend(_voters(answers), cache), _team(3), tmp_path)
    again = _run(CachedBackend(_voters(answers), cache), _team(3), tmp_path / "again")
    trace = json.loads(again.read_text())
    assert trace["metrics"]["llm_cache_hits"] == 3
    returns = {e["agent"]: e for e in trace["events"] if e["type"] == "return"}
    assert all(returns[v]["cached"] for v in ("v0", "v1", "v2"))
    assert [a.cached for a in agent_records(read_trace(again))] == [True, True, True, False]  # the vote made no call
    assert _shown(_payload(again)).count("cache hit yes") == 3
    db, run = trace_store(again)
    with db:
        (row,) = csv.DictReader(io.StringIO(results_csv(db, [run])[0]))
        spans = build_spans(db, run)
    assert row["cached_agents"] == "3"
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 3 and all(s.attributes["lemon.cache_hit"] for s in chats)


def test_explain_counts_llm_cache_hits(tmp_path: Path) -> None:
    """A second `lemon explain` of the same spec is answered from the request cache: every edit says so."""
    cache = SQLiteCache(tmp_path / "llm-cache.sqlite")
    answers = ["The answer is 5.", "The answer is 5.", "The answer is 6."]

    def explain() -> list:  # type: ignore[type-arg]
        pool = scripted_pool(CachedBackend(_voters(answers), cache))
        return asyncio.run(explain_spec(_team(3), TASK, pool, params=SEEDED)).edits

    explain()
    reverted = [e for e in explain() if e.kind == "duty" and e.status == "ran"]
    assert len(reverted) == 3
    assert all(e.spent_tokens == 0 and e.calls == 1 and e.cache_hits == 3 for e in reverted)


def test_latency_is_model_time_and_queueing_is_apart(tmp_path: Path) -> None:
    """Three voters on one level that takes one call at a time: the third waits for two calls, then runs one."""
    path = _run(_voters(["The answer is 5."] * 3, latency_s=0.2), _team(3), tmp_path, concurrency=1)
    agents = {a.name: a for a in agent_records(read_trace(path))}
    third = max((agents[v] for v in ("v0", "v1", "v2")), key=lambda a: a.queued_s or 0.0)
    assert third.queued_s is not None and third.queued_s >= 0.39
    assert third.latency_s is not None and 0.19 <= third.latency_s < third.queued_s
    assert agents["v0"].queued_s is not None and agents["v0"].queued_s < 0.1
    assert f"queued {third.queued_s:.2f}s" in _shown(_payload(path))


def test_the_vote_shows_its_tally(tmp_path: Path) -> None:
    path = _run(_voters(["The answer is 5.", "The answer is 6.", "So 5."]), _team(3), tmp_path)
    vote = next(a for a in agent_records(read_trace(path)) if a.name == "vote")
    assert vote.votes == {"v0": "5", "v1": "6", "v2": "5"}
    text = _shown(_payload(path))
    assert "tally: 5 x2 (v0, v2); 6 x1 (v1)" in text and "not recorded" not in text


def test_an_item_without_an_answer_does_not_read_ok(tmp_path: Path) -> None:
    path = _run(_voters(["No idea."] * 3), _team(3), tmp_path)
    payload = _payload(path)
    assert payload["item"]["prediction"] is None and payload["item"]["status"] == "ok"
    assert payload["item"]["shown_status"] == "no answer"
    assert "status no answer" in _shown(payload) and "status ok" not in _shown(payload)


def test_a_stop_rule_and_its_unrun_agents_are_shown(tmp_path: Path) -> None:
    path = _run(_voters(["The answer is 5."] * 4), _team(4, StopRule(agree=2)), tmp_path)
    payload = _payload(path)
    assert [a["name"] for a in payload["agents"] if a["unrun"]] == ["v2", "v3"]
    assert len(payload["stop_rules"]) == 1
    text = _shown(payload)
    assert "stop rule {agree: 2} of vote fired after v0, v1; not run: v2, v3" in text
    assert text.count("NOT RUN: a stop rule fired first") == 2 and "DEAD" not in text
    assert "stop: final_answer" in text  # the run's own end is still the last stop event


def test_explain_of_a_stopped_vote_lists_the_rule_and_its_unrun_agents(tmp_path: Path) -> None:
    from lemon.cli.view_cmds import attribution_table
    from lemon.inspection.explain import explain_stored, plan_trace

    backend = _voters(["The answer is 5."] * 4)
    path = _run(backend, _team(4, StopRule(agree=2)), tmp_path)
    db, run = trace_store(path)
    with db:
        (row,) = db.items(run.run_id)
        trace = db.trace(run.run_id, row.item_id, row.seed)
        assert trace is not None
        att = asyncio.run(explain_stored(db, plan_trace(run, row, trace, scripted_pool(backend), gold="5")))
    assert att.original["unrun_agents"] == ["v2", "v3"] and att.original["correct"] is True
    console = Console(record=True, width=240)
    console.print(attribution_table(att))
    assert "stop rule {agree: 2} of vote fired after v0, v1; not run: v2, v3" in console.export_text()
