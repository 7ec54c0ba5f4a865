"""A `lemon run` trace is first-class: trace, view, explain and every export take its file or its id (issue 23)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

from .conftest import assert_one_line_error, json_out, lemon

POOL = ("name: scripted\nlevels:\n  - {name: small, backend: scripted, model: s}\n"
        "  - {name: medium, backend: scripted, model: m}\n  - {name: large, backend: scripted, model: l}\n")


@pytest.fixture
def run_trace(tmp_path: Path, _isolated_home: Path) -> Path:
    """The trace of a real `lemon run` (template orchestration: five prose and five program voters under the
    learned stop rule, which stops here after two prose voters agree) on a scripted pool file (its reply to this
    task holds a number, so an answer is extracted)."""
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    proc = lemon("run", "What is 2 + 4?", "--pool", str(pool), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    (path,) = (_isolated_home / "runs").glob("trace-*.json")
    assert f"trace: {path}" in " ".join(proc.stdout.split())
    return path


def _id(path: Path) -> str:
    return path.stem.removeprefix("trace-")


def test_trace_reads_a_run_trace_by_id_and_by_file(run_trace: Path, _isolated_home: Path) -> None:
    shown = lemon("trace", _id(run_trace)[:8], home=_isolated_home)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert f"run {_id(run_trace)}" in text and "What is 2 + 4?" in text and "solver_2" in text
    payload = json_out(lemon("trace", str(run_trace), "--json", home=_isolated_home))
    assert isinstance(payload, dict)
    assert payload["run"]["run_id"] == _id(run_trace) and payload["run"]["method"] == "template"
    assert payload["item"]["gold"] is None and payload["item"]["status"] == "ok"
    assert [a["name"] for a in payload["agents"]] == ["solver", *(f"solver_{i}" for i in range(2, 6)), "program",
                                                      *(f"program_{i}" for i in range(2, 6)), "vote"]
    assert payload["trace"]["task"] == "What is 2 + 4?"


def test_view_and_exports_read_a_run_trace(run_trace: Path, tmp_path: Path, _isolated_home: Path) -> None:
    page = tmp_path / "v.html"
    proc = lemon("view", _id(run_trace)[:10], "--file", str(page), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    assert f'"start":"#item/{_id(run_trace)}/task/0"' in html and str(run_trace) in html
    table = lemon("export", "csv", str(run_trace), home=_isolated_home)
    assert table.returncode == 0, table.stderr
    (row,) = list(csv.DictReader(io.StringIO(table.stdout)))
    # two voters agreed, so three agents ran
    assert row["run_id"] == _id(run_trace) and row["gold"] == "" and int(row["n_agents"]) == 3
    log_file = tmp_path / "run.eval"
    assert lemon("export", "inspect", _id(run_trace), str(log_file), home=_isolated_home).returncode == 0
    log = read_eval_log(str(log_file))
    assert log.samples is not None and len(log.samples) == 1 and "What is 2 + 4?" in str(log.samples[0].input)
    spans_file = tmp_path / "spans.jsonl"
    proc = lemon("export", "otel", _id(run_trace), "--file", str(spans_file), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    (request,) = [json.loads(line) for line in spans_file.read_text().splitlines()]
    spans = [s for rs in request["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert {s["name"] for s in spans} >= {"invoke_agent solver", "invoke_agent vote", "chat l"}
    assert all(len(s["traceId"]) == 32 for s in spans)  # OTLP/JSON: ids in hex


def test_explain_replays_a_run_trace(run_trace: Path, _isolated_home: Path) -> None:
    proc = lemon("explain", _id(run_trace), "--json", "--gold", "6", home=_isolated_home)
    att = json_out(proc)
    assert isinstance(att, dict)
    assert att["run_id"] == _id(run_trace) and att["task"] == "What is 2 + 4?"
    assert att["original"]["gold"] == "6" and att["original"]["prediction"] is not None
    ran = [e for e in att["edits"] if e["status"] == "ran"]
    assert ran and all(e["correct"] is not None for e in ran)
    assert "edit(s) to run" in proc.stderr


def test_an_unknown_trace_id_is_one_line(run_trace: Path, _isolated_home: Path) -> None:
    assert_one_line_error(lemon("trace", "abcdef12", home=_isolated_home), "no run or trace 'abcdef12'")
    not_a_trace = run_trace.parent / "other.json"
    not_a_trace.write_text('{"agents": []}')
    assert_one_line_error(lemon("view", str(not_a_trace), home=_isolated_home), "not a LEMON results store")
