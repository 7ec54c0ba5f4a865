"""One dialect for outputs (issue 23, point 4): `--out` is a folder for every command, a file is `--file` (or a
positional), old spellings still work with a notice; `export csv` prints, `export otel` writes a file and sends
auth headers; `eval --seed/--out`; `runs list --json`; full run ids; no `nan` for a partial run."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lemon.evaluation.report import build_report
from lemon.evaluation.store import ResultsStore
from tests.llm.servers import QuietHandler, root_url, serving

from .conftest import Stored, json_out, lemon


def _ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_out_is_a_folder_and_file_a_file(stored: Stored, tmp_path: Path, _isolated_home: Path) -> None:
    store, home, folder = str(stored.store), _isolated_home, tmp_path / "out"
    _ok(lemon("view", "--store", store, "--out", str(folder), home=home))
    _ok(lemon("report", "--store", store, "--out", str(folder), home=home))
    _ok(lemon("export", "csv", "--store", store, "--out", str(folder), home=home))
    _ok(lemon("export", "inspect", stored.good, "--store", store, "--out", str(folder), home=home))
    _ok(lemon("trace", stored.good, stored.items[0], "--store", store, "--out", str(folder), home=home))
    written = sorted(p.name for p in folder.iterdir())
    assert written == sorted(["lemon-view.html", "results.md", "accuracy-vs-tokens.png", "results.csv",
                              f"{stored.good[:16]}.eval", f"trace-{stored.good[:16]}.json"])
    printed = _ok(lemon("export", "csv", "--store", store, home=home)).stdout
    assert len(list(csv.DictReader(io.StringIO(printed)))) == 2 * len(stored.items)  # stdout by default
    old = _ok(lemon("view", "--store", store, "--out", str(tmp_path / "page.html"), home=home))
    assert (tmp_path / "page.html").is_file() and "--out is now a folder, write --file" in " ".join(old.stderr.split())
    _ok(lemon("view", "--store", store, "--file", str(tmp_path / "f.html"), home=home))
    assert (tmp_path / "f.html").is_file()


class _HeaderReceiver(QuietHandler):
    protocol_version = "HTTP/1.0"  # its replies have no Content-Length: closing the connection ends them

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.seen.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
        self.send_response(200 if self.headers.get("Authorization") == "Basic cGs6c2s=" else 401)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()


@contextmanager
def _langfuse_like() -> Iterator[tuple[str, list[str | None]]]:
    """An OTLP/HTTP endpoint that, like Langfuse's, answers 401 without the right Authorization header."""
    with serving(_HeaderReceiver) as server:
        server.seen = []  # type: ignore[attr-defined]
        yield f"{root_url(server)}/api/public/otel/v1/traces", server.seen  # type: ignore[attr-defined]


def test_export_otel_sends_auth_headers_and_writes_a_file(stored: Stored, tmp_path: Path,
                                                           _isolated_home: Path) -> None:
    store = str(stored.store)
    with _langfuse_like() as (url, seen):
        refused = lemon("export", "otel", stored.good, "--endpoint", url, "--store", store, home=_isolated_home)
        assert refused.returncode == 2
        assert "answered HTTP 401; check the credentials" in " ".join(refused.stderr.split())
        sent = _ok(lemon("export", "otel", stored.good, "--endpoint", url, "--header", "Authorization=Basic cGs6c2s=",
                         "--store", store, home=_isolated_home))
    assert "sent 42 spans" in sent.stdout and seen[0] is None and seen[1:] == ["Basic cGs6c2s="] * (len(seen) - 1)
    path = tmp_path / "spans.jsonl"
    _ok(lemon("export", "otel", stored.good, "--file", str(path), "--store", store, home=_isolated_home))
    spans = [s for line in path.read_text().splitlines() for rs in json.loads(line)["resourceSpans"]
             for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert len(spans) == 7 * len(stored.items)


def test_eval_takes_seed_and_out(tmp_path: Path, _isolated_home: Path, data_dir: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text("name: scripted\nlevels:\n  - {name: small, backend: scripted, model: s}\n")
    folder = tmp_path / "results"
    proc = _ok(lemon("eval", "multiarith", "-m", "vanilla", "--limit", "2", "--pool", str(pool), "--level", "small",
                     "--seed", "2", "--out", str(folder), "--data-dir", str(data_dir), home=_isolated_home))
    with ResultsStore(folder / "results.sqlite") as db:
        (run,) = db.runs()
        assert {r.seed for r in db.items(run.run_id)} == {2} and db.count(run.run_id) == 2
    assert f"lemon view {run.run_id}" in " ".join(proc.stdout.split())
    (listed,) = json_out(lemon("runs", "list", "--json", "--store", str(folder / "results.sqlite"),  # type: ignore[misc]
                               home=_isolated_home))
    assert listed["run_id"] == run.run_id and listed["stored"] == 2 and listed["seeds"] == 1  # one seed: 2


def test_runs_list_json_and_run_ids_are_never_cut(stored: Stored, _isolated_home: Path) -> None:
    runs = json_out(lemon("runs", "list", "--json", "--store", str(stored.store), home=_isolated_home))
    assert isinstance(runs, list) and {r["run_id"] for r in runs} == {stored.good, stored.bad}
    env = {**os.environ, "LEMON_HOME": str(_isolated_home), "COLUMNS": "70"}
    narrow = subprocess.run([sys.executable, "-m", "lemon.cli.main", "runs", "--store", str(stored.store)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert narrow.returncode == 0, narrow.stderr
    assert stored.good in narrow.stdout and stored.bad in narrow.stdout  # whole, on one line
    report = subprocess.run([sys.executable, "-m", "lemon.cli.main", "report", "--store", str(stored.store)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    shown = set(report.stdout.split())  # rendered for 70 columns (issue 52): each run id whole, on one line
    assert stored.good in shown and stored.bad in shown


def test_a_partial_run_shows_no_nan(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as db:
        db.ensure_run("started0", benchmark="gsm8k", split="test", method="cot", pool="tiny", level="small",
                      seeds=1, n_items=4, config={})
        report = build_report(db)
    assert "nan" not in report.markdown and "(partial: 0/4 rows)" in report.markdown
