"""The trace holds what a person needs, and `lemon trace` shows it (readable, escaped, --json, prefixes)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from lemon.errors import LemonError
from lemon.evaluation.store import ResultsStore, open_existing_store
from lemon.inspection.itemview import agent_records
from lemon.llm.base import ChatRequest
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime.trace import Trace
from tests.evalcall import evaluate_kw
from tests.evaluation.conftest import eval_pool

from .conftest import Stored, assert_one_line_error, json_out, lemon


def test_trace_holds_task_prompts_models_tokens(stored: Stored) -> None:
    with ResultsStore(stored.store) as db:
        item = stored.items[0]
        trace = db.trace(stored.good, item)
        row = next(r for r in db.items(stored.good) if r.item_id == item)
    assert trace is not None
    assert trace.task is not None and stored.questions[item] in trace.task
    assert trace.system["models"] == {"small": "scripted-good", "medium": "scripted-good", "large": "scripted-good"}
    assert trace.rewards == {"correct": 1.0}
    agents = {a.name: a for a in agent_records(trace)}
    assert set(agents) == set(row.tokens) and len(agents) == 3
    for name, a in agents.items():
        assert a.model == "scripted-good" and a.live and a.ran
        assert a.prompt_tokens == row.tokens[name]["prompt"] and a.completion_tokens == row.tokens[name]["completion"]
        assert a.prompt is not None and [m["role"] for m in a.prompt] == ["system", "user"]
        assert stored.questions[item] in a.prompt[1]["content"]
        assert a.output is not None and "The answer is" in a.output
        assert a.latency_s is not None and a.latency_s >= 0
    # a child's prompt carries its parents' outputs verbatim: the prompt is what the model was really sent
    child = next(a for a in agents.values() if a.depends_on)
    assert agents[child.depends_on[0]].output.strip() in child.prompt[1]["content"]


def test_orchestrator_raw_output_and_repairs_are_in_the_trace(tmp_path: Path, data_dir: Path) -> None:
    raw = json.dumps({"agents": [{"name": "solver", "role": "math_solver", "duty": "Solve it.", "capacity": "small",
                                  "depends_on": []}], "output": "nobody"})

    def reply(request: ChatRequest) -> str:
        return raw if request.json_schema is not None else "The answer is 3."

    backend = ScriptedBackend("scripted-orch", responder=reply)
    summary = asyncio.run(evaluate_kw("multiarith", "prompted", limit=1, store=tmp_path / "r.sqlite", data_dir=data_dir,
                                      pool="scripted", level="small",
                                      pool_factory=lambda: eval_pool(backend)))
    with ResultsStore(tmp_path / "r.sqlite") as db:
        (row,) = db.items(summary.run_id)
        trace = db.trace(summary.run_id, row.item_id)
    assert trace is not None
    (decision,) = [e for e in trace.events if e["type"] == "orchestrator_decision"]
    assert decision["raw"] == raw and decision["source"] == "repaired"
    assert any("nobody" in w for w in decision["warnings"])
    assert decision["prompt_tokens"] > 0 and decision["completion_tokens"] > 0


def test_an_old_trace_without_the_new_fields_still_loads(stored: Stored, _isolated_home: Path) -> None:
    with ResultsStore(stored.store) as db:
        stored_trace = db.trace(stored.good, stored.items[0])
    assert stored_trace is not None
    trace = stored_trace.to_json()
    old = {k: v for k, v in trace.items() if k not in ("task", "prompts", "version")}
    old["system"] = {k: v for k, v in old["system"].items() if k != "models"}
    old["metrics"] = {k: v for k, v in old["metrics"].items() if k != "tokens_by_agent"}
    for e in old["events"]:
        for k in ("prompt_tokens", "completion_tokens", "model"):
            e.pop(k, None)
    assert Trace.from_json(old).task is None and Trace.from_json(old).prompts == {}
    assert Trace.from_json(trace).to_json() == trace  # round trip of a new one
    records = agent_records(Trace.from_json(old))
    assert records and all(r.prompt is None and r.output for r in records)
    db = sqlite3.connect(stored.store)
    db.execute("UPDATE traces SET trace_json = ? WHERE run_id = ? AND item_id = ?",
               (json.dumps(old), stored.good, stored.items[0]))
    db.commit()
    db.close()
    proc = lemon("trace", stored.good, stored.items[0], "--store", str(stored.store), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    assert "not recorded" in proc.stdout and "Traceback" not in proc.stderr


def test_cli_shows_an_item_readably_with_markup_escaped(stored: Stored, _isolated_home: Path) -> None:
    item = stored.items[1]
    proc = lemon("trace", stored.bad[:6], item, "--store", str(stored.store), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "WRONG" in out and f"item {item}" in out and stored.bad in out
    assert stored.questions[item].split()[0] in out  # the task text
    assert "[bold red]not markup[/]" in out  # an agent's output is printed literally, not as rich markup
    assert "[system]" in out and "[user]" in out and "[output]" in out and "scripted-bad" in out
    assert "stop: final_answer" in out
    right = lemon("trace", stored.good, item.split("/")[-1], "--store", str(stored.store), home=_isolated_home)
    assert right.returncode == 0 and "RIGHT" in right.stdout  # a bare item number is accepted


def test_cli_lists_items_and_prints_json(stored: Stored, _isolated_home: Path) -> None:
    listing = lemon("trace", stored.good[:5], "--store", str(stored.store), home=_isolated_home)
    assert listing.returncode == 0, listing.stderr
    assert all(i in listing.stdout for i in stored.items)
    rows = json_out(lemon("trace", stored.good, "--json", "--store", str(stored.store), home=_isolated_home))
    assert isinstance(rows, list) and sorted(r["item_id"] for r in rows) == sorted(stored.items)
    one = json_out(lemon("trace", stored.good, stored.items[0], "--json", "--store", str(stored.store),
                         home=_isolated_home))
    assert isinstance(one, dict)
    assert one["item"]["correct"] is True and one["trace"]["task"] and len(one["agents"]) == 3
    assert all(a["prompt"] and a["model"] == "scripted-good" for a in one["agents"])


def test_cli_bad_input_is_one_line(stored: Stored, tmp_path: Path, _isolated_home: Path) -> None:
    s = str(stored.store)
    assert_one_line_error(lemon("trace", "ffffffffff", "--store", s, home=_isolated_home), "no run 'ffffffffff'")
    assert_one_line_error(lemon("trace", stored.good, "multiarith/nope", "--store", s, home=_isolated_home),
                          "has no item 'multiarith/nope'")
    assert_one_line_error(lemon("trace", stored.good, stored.items[0], "--seed", "7", "--store", s,
                                home=_isolated_home), "no seed 7")
    missing = tmp_path / "none.sqlite"
    assert_one_line_error(lemon("trace", "abc", "--store", str(missing), home=_isolated_home), "no results store")
    assert not missing.exists()  # reading never creates a store
    other = tmp_path / "other.sqlite"
    other.write_bytes(b"not a database at all" * 10)
    assert_one_line_error(lemon("trace", "abc", "--store", str(other), home=_isolated_home), "not a LEMON results")
    assert other.read_bytes() == b"not a database at all" * 10
    db = sqlite3.connect(stored.store)
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    assert_one_line_error(lemon("trace", stored.good, "--store", s, home=_isolated_home), "schema version 99")


def test_run_prefix_must_be_unique(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as db:
        for rid in ("abc111", "abc222"):
            db.ensure_run(rid, benchmark="multiarith", split="test", method="cot", pool="p", level="small",
                          seeds=1, n_items=1, config={})
    with open_existing_store(tmp_path / "r.sqlite") as db:
        assert db.resolve_run("abc1").run_id == "abc111"
        with pytest.raises(LemonError, match="matches 2 runs"):
            db.resolve_run("abc")
        with pytest.raises(LemonError, match="no run"):
            db.resolve_run("")
