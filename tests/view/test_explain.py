"""`lemon explain` on stored runs with scripted pools: plan, bounds, replay without calls, Delta, storage."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from lemon.benchmarks.registry import load_split
from lemon.errors import LemonError
from lemon.evaluation.evaluate import default_split
from lemon.evaluation.store import ResultsStore
from lemon.inspection.explain import explain_stored, plan_stored
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.pool import Pool
from lemon.llm.scripted import ScriptedBackend
from tests.evalcall import evaluate_kw
from tests.pools import LEVELS, pool_of

from .conftest import assert_one_line_error, lemon


def _pool(answers: dict[str, str], prefix: str = "m") -> Pool:
    """One scripted backend per level (distinct model ids, so a capacity edit changes the request).

    Every agent answers right, except the final decision maker when it was given no notes: so the edge into
    the final agent is what makes the answer right (Delta +1), and the other fields change nothing."""

    def responder(model: str):  # type: ignore[no-untyped-def]
        return lambda request: reply(model, request)

    def reply(model: str, request: ChatRequest) -> str:
        system, user = request.messages[0].content, request.messages[1].content
        gold = next(a for q, a in answers.items() if q in user)
        # like a sampled model, a different prompt (or model) gives a different text
        tag = hashlib.sha256(f"{model}{system}{user}{request.params.seed}".encode()).hexdigest()[:8]
        if "final decision maker" in system and "Notes from other agents" not in user:
            return f"({tag}) The answer is {int(float(gold)) + 1}."
        return f"({tag}) The answer is {gold}."

    backends = {n: ScriptedBackend(f"{prefix}-{n}", responder=responder(f"{prefix}-{n}")) for n in LEVELS}
    return pool_of(backends, concurrency=8, defaults=GenParams(max_tokens=64))


def _stored_chain(tmp_path: Path, data_dir: Path, level: str = "large") -> tuple[Path, str, str, dict[str, str]]:
    items = list(load_split("multiarith", default_split("multiarith"), data_dir=data_dir))[:2]
    answers = {i.question: str(i.answer) for i in items}
    store = tmp_path / "r.sqlite"
    summary = asyncio.run(evaluate_kw("multiarith", "chain", limit=2, store=store, data_dir=data_dir, pool="scripted",
                                      level=level, pool_factory=lambda: _pool(answers)))
    return store, summary.run_id, str(items[0].id), answers


def _explain(store: Path, run_id: str, item: str, pool: Pool, data_dir: Path, **bounds: int):  # type: ignore[no-untyped-def]
    with ResultsStore(store) as db:
        run = db.run(run_id)
        assert run is not None
        (row,) = [r for r in db.items(run_id) if r.item_id == item]
        trace = db.trace(run_id, item)
        assert trace is not None
        plan = plan_stored(run, row, trace, pool, data_dir=data_dir, **bounds)
        estimate = plan.attribution.estimate()
        result = asyncio.run(explain_stored(db, plan))
        stored = db.explanation(run_id, item)
    return result, estimate, stored


def test_every_live_field_is_edited_and_calls_are_the_edited_agents_and_descendants(
        tmp_path: Path, data_dir: Path) -> None:
    store, run_id, item, answers = _stored_chain(tmp_path, data_dir)
    pool = _pool(answers)
    result, (n, est_tokens, est_calls), stored = _explain(store, run_id, item, pool, data_dir)
    by_field = {e.field_label: e for e in result.edits}
    # chain: solver -> checker -> final, all `large`, no duties: 2 edges + 3 capacities
    assert set(by_field) == {"edge checker<-solver", "edge final<-checker", "capacity solver", "capacity checker",
                             "capacity final"}
    assert all(e.status == "ran" for e in result.edits) and n == 5
    expected = {"edge checker<-solver": 2, "edge final<-checker": 1, "capacity solver": 3,
                "capacity checker": 2, "capacity final": 1}
    assert {f: e.calls for f, e in by_field.items()} == expected
    assert result.calls == sum(expected.values()) == est_calls
    assert sum(len(b.calls) for b in (lv.backend for lv in pool.levels)) == result.calls  # type: ignore[attr-defined]
    # the edge into the final agent is what made it right; nothing else matters here
    assert by_field["edge final<-checker"].delta == 1.0 and by_field["edge final<-checker"].correct is False
    assert all(e.delta == 0.0 for f, e in by_field.items() if f != "edge final<-checker")
    assert by_field["capacity solver"].cache_hits == 0 and by_field["capacity final"].cache_hits == 2
    assert est_tokens > 0 and stored is not None and len(stored["edits"]) == 5
    assert stored["edits"][0]["field"] and stored["original"]["correct"] is True


def test_bounds_cut_the_plan_before_anything_runs(tmp_path: Path, data_dir: Path) -> None:
    store, run_id, item, answers = _stored_chain(tmp_path, data_dir)
    result, (n, _, _), _ = _explain(store, run_id, item, _pool(answers), data_dir, max_edits=2)
    assert n == 2 and [e.status for e in result.edits].count("ran") == 2
    assert [e.status for e in result.edits].count("over max-edits") == 3
    result, (n, tokens, _), _ = _explain(store, run_id, item, _pool(answers), data_dir, budget_tokens=1)
    assert n == 0 and tokens == 0 and result.calls == 0
    assert all(e.status == "over budget" for e in result.edits)


def test_a_pool_with_other_models_is_refused(tmp_path: Path, data_dir: Path) -> None:
    store, run_id, item, answers = _stored_chain(tmp_path, data_dir)
    with pytest.raises(LemonError, match="explain needs the run's own models"):
        _explain(store, run_id, item, _pool(answers, prefix="other"), data_dir)


def test_cli_bad_input(tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    store, run_id, _, _ = _stored_chain(tmp_path, data_dir)
    assert_one_line_error(lemon("explain", "deadbeef", "multiarith/0", "--store", str(store), home=_isolated_home),
                          "no run 'deadbeef'")
    assert_one_line_error(lemon("explain", run_id, "multiarith/nope", "--store", str(store), home=_isolated_home),
                          "has no item")
    with ResultsStore(store) as db:
        assert db.explanations(run_id) == []  # nothing written


def test_explain_a_spec_file_and_a_task(tmp_path: Path, _isolated_home: Path) -> None:
    import json

    pool = tmp_path / "pool.yaml"
    pool.write_text("name: s\ndefaults: {temperature: 0.0, max_tokens: 32}\nlevels:\n" + "".join(
        f"  - {{name: {n}, backend: scripted, model: scripted-{n}}}\n" for n in LEVELS))
    spec = tmp_path / "spec.yaml"
    spec.write_text("agents:\n  - {name: solver, role: math_solver, duty: \"Solve it.\", capacity: small}\n"
                    "  - {name: final, role: critic, capacity: large, depends_on: [solver]}\n")
    proc = lemon("explain", str(spec), "What is 2 + 2?", "--pool", str(pool), "--json", home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    att = json.loads(proc.stdout)
    calls = {e["field"]: e["calls"] for e in att["edits"]}
    assert calls == {"edge final<-solver": 1, "duty solver": 2, "capacity final": 1}
    assert att["original"]["calls"] == 2 and att["calls"] == 4 and att["run_id"] is None
    assert all(e["delta"] is None and e["note"] in ("answer changed", "same answer") for e in att["edits"])
    assert "3 edit(s) to run" in proc.stderr
