"""Traces are read back through one typed model (`Trace.from_json`): an older format is upgraded, a newer one or a
malformed one refused in one line, by every reader (issue 53, point 3).

`trace_v1.json` is a real trace written before traces carried their `version` (by `lemon eval` of `chain` on a
scripted pool, the store of tests/view/conftest.py, as `lemon run` saves a trace): version 1.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from lemon.errors import TraceError
from lemon.evaluation.store import ResultsStore
from lemon.inspection.itemview import agent_records
from lemon.inspection.tracefile import read_trace
from lemon.runtime import trace as trace_model
from lemon.runtime.trace import TRACE_VERSION, Trace

from .conftest import Stored, assert_one_line_error, json_out, lemon

V1 = Path(__file__).with_name("trace_v1.json")


def test_a_version_1_trace_is_upgraded_on_reading(tmp_path: Path) -> None:
    raw = json.loads(V1.read_text())
    assert "version" not in raw  # written before the field existed
    trace = read_trace(V1)
    assert trace.version == TRACE_VERSION == 2 and trace.to_json()["version"] == 2
    assert trace.trace_id == raw["trace_id"] and trace.task == raw["task"] and trace.events == raw["events"]
    assert {k: v for k, v in trace.to_json().items() if k != "version"} == raw  # nothing else changed
    records = agent_records(trace)
    assert [r.name for r in records] == ["solver", "checker", "final"] and all(r.ran and r.output for r in records)
    older = {k: v for k, v in raw.items() if k not in ("task", "prompts")}  # the oldest traces lack these too
    assert Trace.from_json(older).task is None and Trace.from_json(older).prompts == {}


def test_a_version_1_trace_file_reads_in_the_cli_as_a_new_one(tmp_path: Path, _isolated_home: Path) -> None:
    shown = json_out(lemon("trace", str(V1), "--json", home=_isolated_home))
    assert isinstance(shown, dict) and shown["trace"]["version"] == TRACE_VERSION
    current = tmp_path / "trace-current.json"
    read_trace(V1).save(current)
    again = json_out(lemon("trace", str(current), "--json", home=_isolated_home))
    assert isinstance(again, dict) and again["agents"] == shown["agents"] and again["item"] == shown["item"]


def test_every_format_version_has_its_upgrade_step() -> None:
    assert len(trace_model._UPGRADES) == TRACE_VERSION - 1


def test_a_newer_version_is_refused_in_one_line_naming_the_fix() -> None:
    with pytest.raises(TraceError, match=r"version 3 trace, newer than this LEMON reads \(version 2\); upgrade LEMON"):
        Trace.from_json({**json.loads(V1.read_text()), "version": 3}, source="x.json")
    for bad in ("2", 0, True, 2.0):
        with pytest.raises(TypeError, match="its version is"):
            Trace.from_json({**json.loads(V1.read_text()), "version": bad})


def _set_version(store: Path, run_id: str, version: object) -> None:
    db = sqlite3.connect(store)
    db.execute("UPDATE traces SET trace_json = json_set(trace_json, '$.version', json(?)) WHERE run_id = ?",
               (json.dumps(version), run_id))
    db.commit()
    db.close()


def test_a_store_holding_a_newer_trace_is_refused_by_every_reader(stored: Stored, data_dir: Path, tmp_path: Path,
                                                                   _isolated_home: Path) -> None:
    _set_version(stored.store, stored.good, 99)
    s, item, out = str(stored.store), stored.items[0], tmp_path
    expected = f"is a version 99 trace, newer than this LEMON reads (version {TRACE_VERSION}); upgrade LEMON"
    for args in (("trace", stored.good, item, "--store", s), ("view", "--store", s, "--file", str(out / "v.html")),
                 ("explain", stored.good, item, "--store", s, "--data-dir", str(data_dir)),
                 ("export", "otel", stored.good, "--store", s, "--file", str(out / "o.jsonl")),
                 ("export", "inspect", stored.good, "--store", s, "--file", str(out / "i.eval")),
                 ("report", "--store", s, "--replies", "--data-dir", str(data_dir))):
        proc = lemon(*args, home=_isolated_home)
        assert_one_line_error(proc, expected)
        assert f"run {stored.good}" in proc.stderr, args
    with ResultsStore(stored.store) as db, pytest.raises(TraceError):
        db.topologies(stored.good)  # the readers that pick fields inside SQLite check the version first
    assert lemon("trace", stored.bad, item, "--store", s, home=_isolated_home).returncode == 0  # the other run


def test_a_trace_file_of_a_newer_version_is_refused_in_one_line(tmp_path: Path, _isolated_home: Path) -> None:
    newer = tmp_path / "trace-newer.json"
    newer.write_text(json.dumps({**json.loads(V1.read_text()), "version": 7}))
    for args in (("trace", str(newer)), ("view", str(newer), "--file", str(tmp_path / "v.html")),
                 ("explain", str(newer)), ("export", "csv", str(newer))):
        assert_one_line_error(lemon(*args, home=_isolated_home), f"{newer} is a version 7 trace, newer than")


def test_a_malformed_version_is_one_line_naming_the_row(stored: Stored, _isolated_home: Path) -> None:
    _set_version(stored.store, stored.good, "two")
    assert_one_line_error(lemon("trace", stored.good, stored.items[0], "--store", str(stored.store),
                                home=_isolated_home), "is malformed (TypeError: its version is 'two'")
