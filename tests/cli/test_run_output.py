"""`lemon run` prints the extracted answer first, then the detail; its tables stay apart when piped; `--json`
prints one object for scripts (issue 23, point 3)."""

from __future__ import annotations

import json
from pathlib import Path

from lemon.inspection.tracefile import extracted_answer
from tests.cli.test_cli_core import lemon

POOL = ("name: scripted\nlevels:\n  - {name: small, backend: scripted, model: s}\n"
        "  - {name: medium, backend: scripted, model: m}\n  - {name: large, backend: scripted, model: l}\n")
TASK = "What is 2 + 4?"  # the scripted workers' reply to it holds a number (the hash of the prompt)


def _pool(tmp_path: Path) -> Path:
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    return pool


def test_json_output_is_one_object_with_the_extracted_answer(tmp_path: Path, _isolated_home: Path) -> None:
    proc = lemon("run", TASK, "--pool", str(_pool(tmp_path)), "--json", home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # nothing else on stdout
    assert data["status"] == "ok" and data["output_agent"] == "vote"
    assert data["answer"] is not None and data["answer"] == extracted_answer(TASK, data["output"])
    assert data["answer"] != data["output"]  # the answer, not the winning voter's whole text
    assert Path(data["trace"]).is_file() and data["trace_id"] in data["trace"]
    assert set(data["tokens_by_agent"]) == {"solver", "solver_2", "vote"}  # the first two agreed: the vote stopped
    assert "output: vote" in proc.stderr  # the spec went to stderr


def test_piped_output_puts_the_answer_first_and_keeps_tables_apart(tmp_path: Path, _isolated_home: Path) -> None:
    pool = _pool(tmp_path)
    answer = json.loads(lemon("run", TASK, "--pool", str(pool), "--json", home=_isolated_home).stdout)["answer"]
    proc = lemon("run", TASK, "--pool", str(pool), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if "answer" in ln and "──" in ln)
    assert lines[at + 1] == answer  # the extracted answer, alone on its line
    assert at < next(i for i, ln in enumerate(lines) if ln.startswith("tokens per agent"))
    assert at < next(i for i, ln in enumerate(lines) if ln.startswith("trace: "))
    for i, ln in enumerate(lines):
        if ln.rstrip() in ("tokens per agent", "agents"):  # the two tables' titles
            assert lines[i - 1].strip() == "", f"table glued to the line before it: {lines[i - 1]!r}{ln!r}"
    assert "┘tokens" not in proc.stdout
