"""The README's Python example and `lemon run` are one algorithm: the same task and seed give the same trace
(issue 53, point 1). The example is taken from README.md itself and run as written, with the pool named."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from tests.cli.test_cli_core import lemon

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED_POOL = ("name: scripted\nlevels:\n  - {name: small, backend: scripted, model: s}\n"
                 "  - {name: medium, backend: scripted, model: m}\n  - {name: large, backend: scripted, model: l}\n")
SPEC = """agents:
  - {name: solver, role: math_solver, duty: "Solve it.", capacity: small}
  - {name: final, role: critic, capacity: large, depends_on: [solver]}
"""
# What differs between two runs of one algorithm: when things happened, and the run's own id.
TIMING = {"t", "sent", "wall_clock_s", "trace_id"}


def readme_example() -> str:
    """The README's Python block: the one that imports lemon."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text("utf-8"), re.DOTALL)
    found = [b for b in blocks if "import lemon" in b]
    assert len(found) == 1, "README.md has one Python example that imports lemon"
    return found[0]


def on_pool(code: str, pool: str) -> tuple[str, str]:
    """The example with `pool=` given to its `lemon.run` call (the README's runs on the default pool), and the
    task it runs."""
    tree = ast.parse(code)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "lemon.run"]
    assert len(calls) == 1, "the README's example runs one task with lemon.run"
    call = calls[0]
    call.keywords = [k for k in call.keywords if k.arg != "pool"] + [ast.keyword("pool", ast.Constant(pool))]
    task = call.args[0]
    assert isinstance(task, ast.Constant) and isinstance(task.value, str)
    return ast.unparse(tree), task.value


def comparable(value: object) -> object:
    """A trace (or any JSON value) without what differs between two runs of one algorithm."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def run_both(tmp_path: Path, pool: str, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, object], dict[str, object], str]:
    """The README's example run here (its own LEMON_HOME) and `lemon run --json` in a child process (another
    one, so neither reads the other's LLM cache): (the example's result as JSON with its trace, the command's
    JSON with its trace, what the example printed)."""
    code, task = on_pool(readme_example(), pool)
    work = tmp_path / "script"
    work.mkdir()
    (work / "spec.yaml").write_text(SPEC)  # the example reads one
    monkeypatch.chdir(work)
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # the README's own example
    printed = capsys.readouterr().out
    result = namespace["result"]
    script = {**result.to_json(), "trace": json.loads(Path(result.trace_path).read_text())}  # type: ignore[attr-defined]
    proc = lemon("run", task, "--pool", pool, "--json", home=tmp_path / "cli-home")
    assert proc.returncode == 0, proc.stderr[-3000:]
    command = json.loads(proc.stdout)
    command["trace"] = json.loads(Path(command["trace"]).read_text())
    return script, command, printed


def assert_twins(script: dict[str, object], command: dict[str, object]) -> None:
    trace_a, trace_b = script["trace"], command["trace"]
    assert isinstance(trace_a, dict) and isinstance(trace_b, dict)
    events_a = [(e["type"], e["agent"]) for e in trace_a["events"]]
    assert events_a == [(e["type"], e["agent"]) for e in trace_b["events"]]
    assert trace_a["contents"] == trace_b["contents"] and trace_a["prompts"] == trace_b["prompts"]
    assert comparable(trace_a) == comparable(trace_b)
    for key in ("answer", "output", "spec", "status", "tokens_by_agent", "total_tokens", "calls", "unrun_agents"):
        assert script[key] == command[key], key


def test_the_readme_example_and_lemon_run_give_one_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """On a scripted pool (a test double, fast): the whole comparison, and what the example prints."""
    pool = tmp_path / "pool.yaml"
    pool.write_text(SCRIPTED_POOL)
    script, command, printed = run_both(tmp_path, str(pool), monkeypatch, capsys)
    assert_twins(script, command)
    trace = script["trace"]
    assert isinstance(trace, dict)
    returns = [e for e in trace["events"] if e["type"] == "return" and "params" in e]
    assert returns and all(e["params"]["temperature"] == 0.7 and e["params"]["max_tokens"] == 384 for e in returns)
    assert f"{script['answer']} " in printed and "orchestrator_decision" in printed  # answer, tokens; the trace


@pytest.mark.models
def test_the_readme_example_and_lemon_run_give_one_trace_on_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The acceptance test: real sampled workers (SmolLM2-135M), the same seed, the same trace."""
    script, command, _ = run_both(tmp_path, "tiny", monkeypatch, capsys)
    assert_twins(script, command)
    trace = script["trace"]
    assert isinstance(trace, dict) and trace["system"]["temperature"] == 0.7 and trace["system"]["max_tokens"] == 384
