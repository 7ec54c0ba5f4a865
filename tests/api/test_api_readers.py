"""`lemon.evaluate`, `lemon.read_trace` and `lemon.explain`: what `lemon eval`, `lemon trace` and `lemon explain`
call, so a script and the command store, read and explain the same runs (issue 53, point 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import lemon
from lemon.errors import LemonError
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.scripted import ScriptedBackend
from tests.api.specs import VOTE
from tests.cli.test_cli_core import lemon as lemon_cli
from tests.pools import scripted_pool

POOL = ("name: scripted\nlevels:\n  - {name: small, backend: scripted, model: s}\n"
        "  - {name: medium, backend: scripted, model: m}\n  - {name: large, backend: scripted, model: l}\n")


def _pool_file(tmp_path: Path) -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(POOL)
    return path


def test_read_trace_by_path_or_id_is_the_typed_trace_the_run_saved(tmp_path: Path) -> None:
    result = lemon.run("What is 2 + 4?", pool=_pool_file(tmp_path))
    assert result.trace_path is not None
    saved = json.loads(json.dumps(result.trace.to_json()))
    for ref in (result.trace_path, str(result.trace_path), result.trace.trace_id, result.trace.trace_id[:8]):
        trace = lemon.read_trace(ref)
        assert isinstance(trace, lemon.Trace) and trace.to_json() == saved
    assert "orchestrator_decision" in str(trace) and trace.task == "What is 2 + 4?"
    with pytest.raises(LemonError, match="no trace 'deadbeef'"):
        lemon.read_trace("deadbeef")
    other = tmp_path / "other.json"
    other.write_text('{"agents": []}')
    with pytest.raises(LemonError, match="not a LEMON trace"):
        lemon.read_trace(other)


def test_evaluate_and_lemon_eval_fill_one_run(tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    """The script's run and the command's are one run: the command resumes it and computes nothing."""
    pool, store = _pool_file(tmp_path), tmp_path / "results.sqlite"
    for method, level in (("vanilla", "small"), ("template", None)):
        summary = lemon.evaluate("multiarith", method, limit=2, pool=pool, level=level, store=store,
                                 data_dir=data_dir)
        assert summary.computed == 2 and summary.n_items == 2 and summary.stats.rows == 2
        args = ["--level", level] if level else []
        proc = lemon_cli("eval", "multiarith", "--method", method, "--limit", "2", "--pool", str(pool), *args,
                         "--store", str(store), "--data-dir", str(data_dir), "--json", home=_isolated_home)
        assert proc.returncode == 0, proc.stderr[-2000:]
        said = json.loads(proc.stdout)
        assert said["run_id"] == summary.run_id and said["computed"] == 0 and said["resumed"] == 2


def test_evaluate_checks_its_arguments_before_any_item_runs(tmp_path: Path, data_dir: Path) -> None:
    pool = _pool_file(tmp_path)
    with pytest.raises(LemonError, match="--level 'huge' is not a level"):
        lemon.evaluate("multiarith", "vanilla", level="huge", pool=pool, data_dir=data_dir)
    with pytest.raises(LemonError, match="chooses the level of each agent"):
        lemon.evaluate("multiarith", "template", level="small", pool=pool, data_dir=data_dir)
    with pytest.raises(LemonError, match="max_tokens must be a positive integer"):
        lemon.evaluate("multiarith", "vanilla", max_tokens=0, pool=pool, data_dir=data_dir)
    assert not (tmp_path / "lemon-home" / "results.sqlite").exists()


def _seed_worded(request: ChatRequest) -> str:
    return f"Working it out (draw {request.params.seed}). The answer is 6."


def test_explain_a_spec_runs_it_as_execute_does(tmp_path: Path) -> None:
    """`lemon explain SPEC TASK` ran the spec on the pool file's greedy settings and voted on whole texts, so
    its attribution explained a run `lemon exec` never makes; now the original run is `lemon.execute`'s."""
    backend = ScriptedBackend("l", responder=_seed_worded)
    pool = scripted_pool(backend, defaults=GenParams(temperature=0.0, max_tokens=128))
    spec = lemon.Spec.parse(VOTE, pool=pool)
    executed = lemon.execute(spec, "What is 2 + 4?", pool=pool, save_trace=False)
    first = list(backend.calls)
    att = lemon.explain(spec, "What is 2 + 4?", pool=pool, gold="6", max_edits=1)
    assert att.original["calls"] == executed.run.calls == 2 and att.original["correct"] is True
    assert att.original["prediction"] == executed.answer == "6"
    assert backend.calls[:2] == first[:2] == first  # the same two requests: seed, temperature 0.7, 384 tokens
    assert {c.params.temperature for c in backend.calls} == {0.7} and {c.params.max_tokens for c in first} == {384}
    with pytest.raises(LemonError, match="needs the task text"):
        lemon.explain(spec)
