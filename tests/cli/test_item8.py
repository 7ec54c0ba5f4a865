"""The command-line defects of issue 14, item 8, each as a person meets it: a real `lemon` process, real SQLite,
pools of the scripted test double (no model weights) or an OpenAI-compatible test double on 127.0.0.1."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from lemon.cli.session import AgentProgress
from lemon.spec.parse import parse_spec
from tests.cli.test_cli_core import GOOD, _scripted_pool, assert_clean_error, lemon
from tests.llm.servers import completion, scripted_http_server

DEAD = GOOD + "  - {name: idle, role: critic, capacity: small}\noutput: final\n"


def _spec(tmp_path: Path, text: str = GOOD) -> Path:
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    return spec


@pytest.mark.parametrize("task", ["", "   \n\t"], ids=["empty", "blank"])
def test_an_empty_task_is_refused_in_one_line(task: str, tmp_path: Path, _isolated_home: Path) -> None:
    pool = str(_scripted_pool(tmp_path))
    assert_clean_error(lemon("run", task, "--pool", pool, home=_isolated_home), "the task is empty")
    assert_clean_error(lemon("exec", str(_spec(tmp_path)), task, "--pool", pool, home=_isolated_home),
                       "the task is empty")


def test_a_cached_rerun_reports_the_cache_hits_its_trace_records(tmp_path: Path, _isolated_home: Path) -> None:
    args = ("exec", str(_spec(tmp_path)), "2+2?", "--pool", str(_scripted_pool(tmp_path)), "--out", str(tmp_path))
    first = lemon(*args, home=_isolated_home)
    assert first.returncode == 0, first.stderr
    assert "model calls: 2, served from cache: 0" in first.stdout
    again = lemon(*args, home=_isolated_home)
    assert again.returncode == 0, again.stderr
    trace_file = again.stdout.split("trace: ")[1].split()[0]
    hits = json.loads(Path(trace_file).read_text())["metrics"]["llm_cache_hits"]
    assert hits == 2 and "model calls: 2, served from cache: 2" in again.stdout


def test_a_pruned_agent_is_shown_pruned_not_waiting(tmp_path: Path, _isolated_home: Path) -> None:
    progress = AgentProgress(parse_spec(DEAD))
    progress.on_event({"type": "despawn", "agent": "idle", "reason": "not an ancestor of the output agent"})
    assert progress.rows["idle"]["state"] == "pruned"
    proc = lemon("exec", str(_spec(tmp_path, DEAD)), "2+2?", "--pool", str(_scripted_pool(tmp_path)),
                 home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "idle" in line and "critic" in line)
    assert "pruned" in row and "waiting" not in row
    assert "pruned: idle (not an ancestor of the output agent; not run)" in proc.stdout


def test_level_is_refused_where_the_method_chooses_levels(tmp_path: Path, _isolated_home: Path,
                                                           data_dir: Path) -> None:
    pool = str(_scripted_pool(tmp_path))
    assert_clean_error(lemon("run", "2+2?", "--pool", pool, "--level", "small", home=_isolated_home),
                       "applies only to --orchestrator prompted")
    store = str(tmp_path / "r.sqlite")
    common = ("--limit", "2", "--pool", pool, "--store", store, "--data-dir", str(data_dir))
    assert_clean_error(lemon("eval", "multiarith", "-m", "template", "--level", "small", *common,
                             home=_isolated_home), "chooses the level of each agent itself")
    proc = lemon("eval", "multiarith", "-m", "template", *common, home=_isolated_home)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = " ".join(proc.stdout.split())
    assert "level chosen by the method" in shown and "level medium" not in shown
    proc = lemon("eval", "multiarith", "-m", "vanilla", "--level", "small", *common, home=_isolated_home)
    assert proc.returncode == 0 and "level small" in " ".join(proc.stdout.split())


def test_models_shows_only_the_pools_models(tmp_path: Path, _isolated_home: Path) -> None:
    proc = lemon("models", "--pool", str(_scripted_pool(tmp_path)), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    assert "smollm2" not in proc.stdout and "qwen" not in proc.stdout
    assert "test double (scripted)" in proc.stdout and "small" in proc.stdout and "large" in proc.stdout


def test_validate_lists_every_problem(tmp_path: Path, _isolated_home: Path) -> None:
    bad = _spec(tmp_path, "agents:\n  - {name: a, role: wizard, capacity: small}\n"
                          "  - {name: b, role: critic, capacity: huge, depends_on: [x]}\n")
    proc = lemon("validate", str(bad), "--pool", str(_scripted_pool(tmp_path)), home=_isolated_home)
    assert_clean_error(proc, "3 problems (listed above)")
    problems = [line for line in proc.stderr.splitlines() if line.startswith("problem:")]
    assert len(problems) == 3
    assert "unknown base role 'wizard'" in problems[0] and "unknown level 'huge'" in problems[1]
    assert "no agent is named 'x'" in problems[2]
    schema = _spec(tmp_path, "agents:\n  - {name: A, role: critic, capacity: small, colour: red}\n")
    proc = lemon("validate", str(schema), "--pool", str(_scripted_pool(tmp_path)), home=_isolated_home)
    assert_clean_error(proc, "2 problems")


def test_the_fallback_warning_is_printed_once(tmp_path: Path, _isolated_home: Path) -> None:
    """The scripted writer's reply is no spec: the default orchestration's team runs, with ONE warning."""
    proc = lemon("run", "2+2?", "--orchestrator", "prompted", "--pool", str(_scripted_pool(tmp_path)),
                 home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout + proc.stderr).count("using the default orchestration's team") == 1


def test_eval_prints_no_repair_warning_per_item(tmp_path: Path, _isolated_home: Path, data_dir: Path) -> None:
    proc = lemon("eval", "multiarith", "-m", "prompted", "--limit", "3", "--pool", str(_scripted_pool(tmp_path)),
                 "--store", str(tmp_path / "r.sqlite"), "--data-dir", str(data_dir), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "default orchestration" not in proc.stderr and "warning" not in proc.stderr.lower()


def test_eval_uses_the_one_max_tokens_default_whatever_the_pools(tmp_path: Path, _isolated_home: Path,
                                                                  data_dir: Path) -> None:
    """`tiny`'s 128 tokens cut CoT mid-sentence in eval while run/exec used 384: now every command uses 384."""
    from lemon.api.eval import identity_max_tokens

    assert identity_max_tokens("cpu", 384) is None  # cpu's own default: stored cpu runs keep their ids
    assert identity_max_tokens("tiny", 384) == 384
    pool = tmp_path / "p.yaml"
    pool.write_text("name: p\ndefaults: {max_tokens: 32}\n" + _scripted_pool(tmp_path).read_text().split("\n", 1)[1])
    store = tmp_path / "r.sqlite"
    proc = lemon("eval", "multiarith", "-m", "cot", "--limit", "1", "--level", "small", "--pool", str(pool),
                 "--store", str(store), "--data-dir", str(data_dir), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr[-2000:]
    db = sqlite3.connect(store)
    (config,) = db.execute("SELECT config_json FROM runs").fetchone()
    db.close()
    assert json.loads(config)["max_tokens"] == 384


# ---- --model / --base-url: one OpenAI-compatible endpoint without a pool file ----------------------------------


def test_model_and_base_url_run_a_spec_on_one_endpoint(tmp_path: Path, _isolated_home: Path, data_dir: Path) -> None:
    with scripted_http_server([(200, completion("The answer is 4."), 0.0)]) as (url, received):
        proc = lemon("exec", str(_spec(tmp_path)), "2+2?", "--model", "test-model", "--base-url", url, "--no-cache",
                     home=_isolated_home, timeout=120)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        at = next(i for i, ln in enumerate(lines) if "answer" in ln and "──" in ln)
        assert lines[at + 1] == "4" and "The answer is 4." in lines[at + 2]  # the extracted answer first
        assert len(received) == 2 and {b["model"] for b in received} == {"test-model"}
        store = tmp_path / "r.sqlite"
        proc = lemon("eval", "multiarith", "-m", "vanilla", "--limit", "2", "--model", "test-model", "--base-url",
                     url, "--store", str(store), "--data-dir", str(data_dir), home=_isolated_home, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert len(received) == 4
    pools = list((_isolated_home / "pools").glob("endpoint-*.yaml"))
    assert len(pools) == 1 and url in pools[0].read_text()  # one file per endpoint, reused


@pytest.mark.parametrize(("args", "needle"), [
    (("--model", "m"), "--model and --base-url go together"),
    (("--base-url", "http://127.0.0.1:9/v1"), "--model and --base-url go together"),
    (("--model", "m", "--base-url", "file:///etc/passwd"), "--base-url: "),
    (("--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--pool", "tiny"), "use one of them"),
], ids=["model-only", "url-only", "bad-url", "with-pool"])
def test_model_and_base_url_misuse_is_one_line(args: tuple[str, ...], needle: str, tmp_path: Path,
                                               _isolated_home: Path) -> None:
    assert_clean_error(lemon("exec", str(_spec(tmp_path)), "2+2?", *args, home=_isolated_home), needle)
    assert not (_isolated_home / "pools").exists() or not list((_isolated_home / "pools").iterdir())
