"""`lemon validate / exec / run / models` as a person runs them: exit codes, one-line errors, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.llm.servers import Fault, fault_server

GOOD = """agents:
  - {name: solver, role: math_solver, duty: "Solve it.", capacity: small}
  - {name: final, role: critic, capacity: large, depends_on: [solver]}
"""


def lemon(*args: str, home: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEMON_HOME": str(home), "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "lemon.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def assert_clean_error(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("error:"), proc.stderr
    assert expected in " ".join(proc.stderr.split()), proc.stderr


def test_validate_prints_the_canonical_form(tmp_path: Path, _isolated_home: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(GOOD)
    proc = lemon("validate", str(f), "--pool", "tiny", home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout and 'duty: "Solve it."' in proc.stdout and "output: final" in proc.stdout


BAD_SPECS = [
    ("agents:\n  - name: a\n   role: [", "malformed YAML"),
    ("a: &a [1, 2]\nagents: *a", "anchors/aliases"),
    ("agents: !!python/object/apply:os.system ['true']", "malformed YAML"),
    (json.dumps({"agents": [{"name": f"a{i}", "role": "generalist", "capacity": "small"} for i in range(10_000)]}),
     "characters"),
    ("agents:\n  - {name: a, role: generalist, capacity: small, depends_on: [b]}\n"
     "  - {name: b, role: generalist, capacity: small, depends_on: [a]}", "cycle"),
    ("agents:\n  - {name: a, role: generalist, capacity: small, depends_on: [a]}", "itself"),
    ("agents:\n  - {name: a, role: generalist, capacity: small, depends_on: [x]}", "no agent is named 'x'"),
    ("agents:\n  - {name: a, role: generalist, capacity: huge}", "unknown level 'huge'"),
    ("agents:\n  - {name: a, role: wizard, capacity: small}", "unknown base role 'wizard'"),
]


# Short ids: pytest puts the test id in the child's environment, and a 600 kB id does not fit there.
@pytest.mark.parametrize(("text", "expected"), BAD_SPECS, ids=[e.split()[0].strip("'") for _, e in BAD_SPECS])
def test_bad_specs_exit_2_with_one_line(tmp_path: Path, _isolated_home: Path, text: str, expected: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    assert_clean_error(lemon("validate", str(f), home=_isolated_home), expected)


def test_missing_spec_file_and_unknown_pool(tmp_path: Path, _isolated_home: Path) -> None:
    assert_clean_error(lemon("validate", str(tmp_path / "nope.yaml"), home=_isolated_home), "does not exist")
    f = tmp_path / "s.yaml"
    f.write_text(GOOD)
    assert_clean_error(lemon("validate", str(f), "--pool", "nopool", home=_isolated_home), "neither a built-in")


@pytest.mark.parametrize("args", [("export-gguf", "x", "--out", "y"), ("eval", "gsm8k", "--limit", "many"),
                                  ("no-such-command",)], ids=["unknown-option", "bad-value", "unknown-command"])
def test_usage_errors_exit_2_with_the_usage_and_no_traceback(args: tuple[str, ...], _isolated_home: Path) -> None:
    proc = lemon(*args, home=_isolated_home)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and "Usage: lemon" in proc.stderr


def test_an_endpoint_failing_mid_run_exits_2_and_keeps_the_trace(tmp_path: Path, _isolated_home: Path) -> None:
    """It is there (it answers), but every completion fails: the run stops with one line and its partial trace.
    (One nothing listens on is refused before the run starts: tests/cli/test_unreachable.py.)"""
    pool = tmp_path / "pool.yaml"
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    with fault_server(lambda body, n: Fault(500, b'{"error": {"message": "boom"}}')) as ep:
        pool.write_text("name: remote\nlevels:\n"
                        f"  - {{name: small, backend: openai, base_url: '{ep.base_url}', model: m, max_retries: 1}}\n"
                        f"  - {{name: large, backend: openai, base_url: '{ep.base_url}', model: m, max_retries: 1}}\n")
        proc = lemon("exec", str(spec), "2+2?", "--pool", str(pool), "--trace-dir", str(tmp_path / "traces"),
                     home=_isolated_home, timeout=120)
    assert_clean_error(proc, "kept failing after 2 attempt(s) (HTTP 500: boom)")
    traces = list((tmp_path / "traces").glob("*.json"))
    assert len(traces) == 1 and json.loads(traces[0].read_text())["events"][-1]["reason"] == "error"


@pytest.mark.models
def test_corrupted_model_file_exits_2_naming_the_hash(tmp_path: Path, _isolated_home: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 1000)
    pool = tmp_path / "pool.yaml"
    pool.write_text("name: pinned\nlevels:\n"
                    f"  - {{name: small, backend: embedded, model: '{bad}', sha256: "
                    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53}\n"
                    "  - {name: large, backend: embedded, model: smollm2-135m}\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    assert_clean_error(lemon("exec", str(spec), "2+2?", "--pool", str(pool), home=_isolated_home),
                       "expected b179c9523d0e")


@pytest.mark.models
def test_budget_exceeded_exits_2_and_says_so(tmp_path: Path, _isolated_home: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    proc = lemon("exec", str(spec), "What is 12 * 12?", "--pool", "tiny", "--budget-tokens", "50",
                 home=_isolated_home)
    assert_clean_error(proc, "token budget")


@pytest.mark.models
def test_run_writes_a_spec_answers_and_reports_tokens(tmp_path: Path, _isolated_home: Path) -> None:
    proc = lemon("run", "Tom has 3 apples and buys 4 more. How many apples does he have?", "--pool", "tiny",
                 "--max-tokens", "48", "--trace-dir", str(tmp_path), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    assert "agents:" in proc.stdout and "tokens per agent" in proc.stdout and "answer" in proc.stdout
    trace = json.loads(next(tmp_path.glob("trace-*.json")).read_text())
    assert trace["events"][0]["type"] == "orchestrator_decision" and trace["events"][-1]["type"] == "stop"


@pytest.mark.models
def test_models_lists_every_pinned_model(_isolated_home: Path) -> None:
    proc = lemon("models", home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    for model in ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert model in proc.stdout


# ---- markup, unwritable homes, damaged files (issue 12) ---------------------------------------------------

MARKUP = "[/bold][link=file:///etc/passwd]x[/link]"
MARKUP_PATH = "[/bold][red]x[/red][link=evil]y[/link]"  # a file name (no '//': paths collapse it)


def _scripted_pool(tmp_path: Path) -> Path:
    pool = tmp_path / "scripted.yaml"
    pool.write_text("name: scripted\nlevels:\n  - {name: small, backend: scripted, model: s}\n"
                    "  - {name: large, backend: scripted, model: l}\n")
    return pool


def test_markup_in_a_spec_or_a_path_is_shown_not_applied(tmp_path: Path, _isolated_home: Path) -> None:
    """Rich markup in an agent name or a file name crashed the error printer (MarkupError) or became a link."""
    bad = tmp_path / "s.yaml"
    bad.write_text(f"agents:\n  - {{name: '{MARKUP}', role: math_solver, capacity: small}}\n")
    proc = lemon("validate", str(bad), "--pool", str(_scripted_pool(tmp_path)), home=_isolated_home)
    assert_clean_error(proc, "[/bold][link=file:///etc/passwd]")
    missing = tmp_path / f"{MARKUP_PATH}.yaml"
    assert_clean_error(lemon("validate", str(missing), home=_isolated_home), f"{MARKUP_PATH}.yaml does not exist")


def test_markup_in_trace_dir_and_store_paths_is_printed_literally(tmp_path: Path, _isolated_home: Path,
                                                                  data_dir: Path) -> None:
    traces = tmp_path / MARKUP_PATH
    spec = traces / "spec.yaml"  # the spec's own path holds the markup too ('/' in it makes folders)
    spec.parent.mkdir(parents=True)
    spec.write_text(GOOD)
    pool = _scripted_pool(tmp_path)
    proc = lemon("exec", str(spec), "2+2?", "--pool", str(pool), "--trace-dir", str(traces), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    assert f"trace: {traces}" in " ".join(proc.stdout.split()) and len(list(traces.glob("*.json"))) == 1
    assert "[/bold][red]x[/red]" in proc.stdout.split("agents:")[0]  # the rule above the spec names the file
    store = tmp_path / MARKUP_PATH / "r.sqlite"
    proc = lemon("eval", "multiarith", "--method", "vanilla", "--limit", "2", "--pool", str(pool), "--level",
                 "small", "--store", str(store), "--data-dir", str(data_dir), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert str(store) in "".join(proc.stdout.split("\n")) and "Traceback" not in proc.stderr


def test_exec_prints_the_answer_before_a_trace_save_that_fails(tmp_path: Path) -> None:
    """An unwritable LEMON_HOME made exec spend its calls, then crash before printing the answer."""
    home = tmp_path / "home-is-a-file"
    home.write_text("not a folder")
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    proc = lemon("exec", str(spec), "2+2?", "--pool", str(_scripted_pool(tmp_path)), "--no-cache", home=home)
    assert_clean_error(proc, "the run finished (answer above) but its trace could not be saved")
    assert "answer" in proc.stdout and "[l] answer" in proc.stdout  # the final agent's reply is on stdout


def test_an_unwritable_home_stops_before_any_call_when_caching(tmp_path: Path) -> None:
    home = tmp_path / "home-is-a-file"
    home.write_text("not a folder")
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    proc = lemon("exec", str(spec), "2+2?", "--pool", str(_scripted_pool(tmp_path)), home=home)
    assert_clean_error(proc, "cannot create the folder")
    assert "tokens per agent" not in proc.stdout  # nothing was run


def test_damaged_cache_and_store_files_are_one_line_with_the_fix(tmp_path: Path, _isolated_home: Path) -> None:
    _isolated_home.mkdir(parents=True, exist_ok=True)
    (_isolated_home / "llm-cache.sqlite").write_bytes(b"garbage" * 1000)
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    proc = lemon("exec", str(spec), "2+2?", "--pool", str(_scripted_pool(tmp_path)), home=_isolated_home)
    assert_clean_error(proc, "delete or rename it")
    store = tmp_path / "store.sqlite"
    store.write_text("not a database\n" * 100)
    assert_clean_error(lemon("report", "--store", str(store), home=_isolated_home), "move it aside")


def test_bad_pool_values_exit_2(tmp_path: Path, _isolated_home: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    for bad in ("defaults: {temperature: hot}\n", "defaults: {temperature: .nan}\n"):
        pool = tmp_path / "p.yaml"
        pool.write_text("name: p\n" + bad + _scripted_pool(tmp_path).read_text().split("\n", 1)[1])
        assert_clean_error(lemon("validate", str(spec), "--pool", str(pool), home=_isolated_home), "temperature")
    pool.write_bytes(b"name: caf\xe9\n")
    assert_clean_error(lemon("validate", str(spec), "--pool", str(pool), home=_isolated_home), "not UTF-8")
