"""Inspect eval logs (read back with inspect_ai's own reader) and the flat CSV table match the store."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log, resolve_sample_attachments

from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo

from .conftest import Stored, assert_one_line_error, lemon


@pytest.mark.parametrize("suffix", [".eval", ".json"])
def test_inspect_log_reads_back_with_the_store_scores(stored: Stored, tmp_path: Path, _isolated_home: Path,
                                                     suffix: str) -> None:
    out = tmp_path / f"run{suffix}"
    proc = lemon("export", "inspect", stored.bad[:7], "--file", str(out), "--store", str(stored.store),
                 home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    log = read_eval_log(str(out))
    with ResultsStore(stored.store) as db:
        rows = {(r.item_id, r.seed): r for r in db.items(stored.bad)}
    assert log.status == "success" and log.samples is not None and len(log.samples) == len(rows)
    for s in log.samples:
        row = rows[(str(s.id), s.epoch - 1)]
        assert s.scores is not None and s.scores["correct"].value == (1.0 if row.correct else 0.0)
        assert s.scores["correct"].answer == row.prediction and s.target == row.gold
        assert sum(u.total_tokens for u in s.model_usage.values()) == row.total_tokens
        assert set(s.model_usage) == {"scripted-bad"} and stored.questions[row.item_id] in str(s.input)
    assert log.results is not None
    accuracy = log.results.scores[0].metrics["accuracy"].value
    assert accuracy == pytest.approx(sum(r.correct for r in rows.values()) / len(rows)) == 0.5


def test_csv_has_one_row_per_item_and_seed(stored: Stored, tmp_path: Path, _isolated_home: Path) -> None:
    out = tmp_path / "results.csv"
    proc = lemon("export", "csv", "--file", str(out), "--store", str(stored.store), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    with out.open(newline="") as fh:
        table = list(csv.DictReader(fh))
    with ResultsStore(stored.store) as db:
        expected = {(r.run_id, i.item_id, i.seed): i for r in db.runs() for i in db.items(r.run_id)}
    assert len(table) == len(expected) == 2 * len(stored.items)
    for t in table:
        row = expected[(t["run_id"], t["item_id"], int(t["seed"]))]
        assert int(t["correct"]) == int(row.correct) and int(t["total_tokens"]) == row.total_tokens
        assert int(t["prompt_tokens"]) + int(t["completion_tokens"]) == row.total_tokens
    only = lemon("export", "csv", stored.good, "--file", str(tmp_path / "one.csv"), "--store", str(stored.store),
                 home=_isolated_home)
    assert only.returncode == 0 and (tmp_path / "one.csv").read_text().count("\n") == 1 + len(stored.items)


def test_export_bad_input_writes_nothing(stored: Stored, tmp_path: Path, _isolated_home: Path) -> None:
    outs = tmp_path / "out"
    outs.mkdir()
    out = outs / "x.eval"
    assert_one_line_error(lemon("export", "inspect", "nope", "--file", str(out), "--store", str(stored.store),
                                home=_isolated_home), "no run 'nope'")
    assert_one_line_error(lemon("export", "inspect", stored.good, "--file", str(outs / "x.txt"), "--store",
                                str(stored.store), home=_isolated_home), "ends in .eval or .json")
    assert_one_line_error(lemon("export", "csv", "nope", "--file", str(outs / "x.csv"), "--store",
                                str(stored.store), home=_isolated_home), "no run 'nope'")
    assert list(outs.iterdir()) == []


def test_inspect_log_carries_the_agents_as_events(stored: Stored, tmp_path: Path, _isolated_home: Path) -> None:
    """`inspect view` shows each agent's messages: a span per agent with its model call (messages, output)."""
    out = tmp_path / "run.eval"
    assert lemon("export", "inspect", stored.good, str(out), "--store", str(stored.store),
                 home=_isolated_home).returncode == 0
    log = read_eval_log(str(out))
    assert log.samples is not None
    with ResultsStore(stored.store) as db:
        for s in map(resolve_sample_attachments, log.samples):  # long texts are stored as attachments
            trace = db.trace(stored.good, str(s.id), s.epoch - 1)
            assert trace is not None
            spans = [e for e in s.events if e.event == "span_begin"]
            assert [(e.name, e.type) for e in spans] == [("solver", "agent"), ("checker", "agent"), ("final", "agent")]
            calls = [e for e in s.events if e.event == "model"]
            assert [c.role for c in calls] == ["solver", "checker", "final"]
            for c in calls:
                sent = [(p["role"], p["content"]) for p in trace.prompts[c.role]]
                assert [(m.role, m.text) for m in c.input] == sent
                assert c.output.completion == trace.contents[c.role] and c.model == "scripted-good"
                assert c.span_id == f"agent-{c.role}" and c.output.usage is not None
                assert c.output.usage.total_tokens == sum(trace.metrics["tokens_by_agent"][c.role][k]
                                                          for k in ("prompt", "completion"))


def test_inspect_log_of_a_vote_holds_its_tally(tmp_path: Path) -> None:
    from lemon.inspection.export_inspect import write_inspect_log
    from lemon.inspection.tracefile import trace_store

    from .test_honest_items import _run, _team, _voters

    path = _run(_voters(["The answer is 5.", "The answer is 6.", "So 5."]), _team(3), tmp_path)
    db, run = trace_store(path)
    with db:
        write_inspect_log(db, run, tmp_path / "vote.json")
    (sample,) = read_eval_log(str(tmp_path / "vote.json")).samples or []
    (tally,) = [e for e in sample.events if e.event == "info" and e.source == "vote"]
    assert tally.data["tally"] == [{"answer": "5", "voters": ["v0", "v2"]}, {"answer": "6", "voters": ["v1"]}]
    assert [e.role for e in sample.events if e.event == "model"] == ["v0", "v1", "v2"]


def _scored_and_not(tmp_path: Path) -> tuple[ResultsStore, RunInfo]:
    """A run of two scored items (one right, one wrong) and one without a gold answer."""
    db = ResultsStore(tmp_path / "r.sqlite")
    run = db.ensure_run("r1", benchmark="gsm8k", split="test", method="cot", pool="tiny", level="medium",
                        seeds=1, n_items=3, config={})
    tokens = {"solver": {"prompt": 30, "completion": 12, "capacity": "medium", "model": "embedded:qwen2.5-0.5b"},
              "checker": {"prompt": 20, "completion": 5, "capacity": "large", "model": "openai:gpt-4o-mini"},
              "vote": {"prompt": 0, "completion": 0, "capacity": "medium", "model": "vote"}}
    for item_id, prediction, gold in (("right", "4", "4"), ("wrong", "5", "4"), ("no-gold", "7", None)):
        db.put("r1", ItemRow(item_id=item_id, seed=0, prediction=prediction, gold=gold, correct=prediction == gold,
                             tokens=tokens, total_tokens=67, latency_s=0.5, trace_id=None, status="ok"))
    return db, run


def test_a_run_without_a_gold_answer_is_unscored_in_inspect(tmp_path: Path) -> None:
    """No score for an item without a gold answer: Inspect counts it unscored, and the accuracy is over the
    scored items only (1 of 2, not 1 of 3)."""
    from lemon.inspection.export_inspect import write_inspect_log

    db, run = _scored_and_not(tmp_path)
    with db:
        write_inspect_log(db, run, tmp_path / "run.eval")
    log = read_eval_log(str(tmp_path / "run.eval"))
    samples = {str(s.id): s for s in log.samples or []}
    assert samples["no-gold"].scores is None
    assert samples["right"].scores["correct"].value == 1.0 and samples["wrong"].scores["correct"].value == 0.0
    assert log.results is not None
    (score,) = log.results.scores
    assert score.scored_samples == 2 and score.unscored_samples == 1
    assert score.metrics["accuracy"].value == 0.5


def test_a_trace_without_a_gold_answer_has_no_score(tmp_path: Path) -> None:
    from lemon.inspection.export_inspect import write_inspect_log
    from lemon.inspection.tracefile import trace_store

    from .test_honest_items import _run, _team, _voters

    db, run = trace_store(_run(_voters(["The answer is 5."] * 3), _team(3), tmp_path))
    with db:
        write_inspect_log(db, run, tmp_path / "one.json")
    log = read_eval_log(str(tmp_path / "one.json"))
    (sample,) = log.samples or []
    assert sample.scores is None and log.results is not None and log.results.scores == []


def test_model_usage_is_keyed_by_the_model(tmp_path: Path) -> None:
    """As Inspect keys it: by the model that spent the tokens (a vote calls none), not by the capacity level."""
    from lemon.inspection.export_inspect import inspect_log

    db, run = _scored_and_not(tmp_path)
    with db:
        log = inspect_log(db, run)
    usage = log.stats.model_usage
    assert set(usage) == {"embedded:qwen2.5-0.5b", "openai:gpt-4o-mini"}
    assert usage["embedded:qwen2.5-0.5b"].input_tokens == 3 * 30 and usage["openai:gpt-4o-mini"].total_tokens == 75
    assert all(set(s.model_usage) == set(usage) for s in log.samples or [])
