"""`lemon eval` / `lemon report` as a user runs them: a real process, SIGKILLed mid-run, then resumed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lemon.benchmarks.registry import load_split
from lemon.evaluation.evaluate import default_split

LIMIT = 12


def scripted_pool_yaml(path: Path, latency_s: float, hold: str = "") -> Path:
    """A pool whose levels are the scripted test double (no model weights), slow enough to kill mid-run.
    `hold` (e.g. "hold_file: /x, hold_after_calls: 2") makes calls wait while a file exists."""
    extra = f", {hold}" if hold else ""
    levels = "\n".join(f"  - {{name: {n}, backend: scripted, model: scripted-{n}, "
                       f"latency_s: {latency_s}, concurrency: 4{extra}}}" for n in ("small", "medium", "large"))
    head = "name: scripted-test\ndefaults: {temperature: 0.0, max_tokens: 32}\nlevels:\n"
    path.write_text(head + levels + "\n")
    return path


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "lemon.cli.main", *args]


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "LEMON_HOME": str(home), "COLUMNS": "120"}


def _rows(store: Path) -> list[tuple[str, int]]:
    if not store.exists():
        return []
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5)
        try:
            return [(r[0], r[1]) for r in db.execute("SELECT item_id, seed FROM items")]
        finally:
            db.close()
    except sqlite3.OperationalError:  # schema not created yet
        return []


def test_eval_and_report_are_registered_on_the_main_app() -> None:
    from lemon.cli.main import app

    names = {c.name for c in app.registered_commands}
    assert {"eval", "report"} <= names, "lemon.cli.main must call lemon.cli.bench_cmds.register(app)"


def test_sigkill_mid_run_then_same_command_resumes_each_item_once(tmp_path: Path, data_dir: Path,
                                                                 _isolated_home: Path) -> None:
    store = tmp_path / "results.sqlite"
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", latency_s=0.4)
    cmd = _cli("eval", "multiarith", "--method", "vanilla", "--pool", str(pool), "--level", "small",
               "--limit", str(LIMIT), "--store", str(store), "--data-dir", str(data_dir),
               "--concurrency", "2")
    proc = subprocess.Popen(cmd, env=_env(_isolated_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(_rows(store)) < 3:
            if proc.poll() is not None:
                _, err = proc.communicate()
                pytest.fail(f"eval exited early ({proc.returncode}): {err.decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("no rows written within 120 s")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    before = _rows(store)
    assert 3 <= len(before) < LIMIT, "the process must die mid-run for this test to mean anything"

    done = subprocess.run(cmd, env=_env(_isolated_home), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    after = _rows(store)
    items = load_split("multiarith", default_split("multiarith"), data_dir=data_dir)[:LIMIT]
    expected = {(str(i.id), 0) for i in items}
    assert len(after) == len(set(after)) == LIMIT and set(after) == expected
    assert set(before) <= set(after)
    assert f"resumed {len(before)}" in done.stdout
    # every stored row has its trace beside it, including the rows written before the kill
    db = sqlite3.connect(store)
    (run_id,) = db.execute("SELECT run_id FROM runs").fetchone()
    assert db.execute("SELECT COUNT(*) FROM traces").fetchone()[0] == LIMIT
    db.close()
    first = sorted(after)[0][0]
    shown = subprocess.run(_cli("trace", run_id, first, "--store", str(store), "--out", str(tmp_path / "t.json")),
                           env=_env(_isolated_home), capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert '"trace_id"' in (tmp_path / "t.json").read_text()
    missing = subprocess.run(_cli("trace", run_id, "multiarith/nope", "--store", str(store)),
                             env=_env(_isolated_home), capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "has no item 'multiarith/nope'" in " ".join(missing.stderr.split())
    assert "Traceback" not in missing.stderr

    report = subprocess.run(_cli("report", "--store", str(store), "--out", str(tmp_path / "results.md"),
                                 "--plot", str(tmp_path / "acc.png")),
                            env=_env(_isolated_home), capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    md = (tmp_path / "results.md").read_text()
    assert "## multiarith" in md and "| vanilla |" in md and str(store) in md
    assert (tmp_path / "acc.png").stat().st_size > 0


@pytest.mark.parametrize(("args", "needle"), [
    (("eval", "gsm9k", "--method", "vanilla"), "valid: "),
    (("eval", "gsm8k", "--method", "magic"), "valid: vanilla, cot, sc-cot"),
    (("eval", "gsm8k", "--method", "vanilla", "--split", "nope", "--limit", "1"), "nope"),
    (("eval", "gsm8k", "--method", "vanilla", "--shard", "2/2"), "0 <= I < N"),
    (("eval", "gsm8k", "--method", "vanilla", "--shard", "half"), "expected I/N"),
])
def test_bad_names_exit_2_with_one_line(args: tuple[str, ...], needle: str, tmp_path: Path, data_dir: Path,
                                        _isolated_home: Path) -> None:
    done = subprocess.run(_cli(*args, "--store", str(tmp_path / "r.sqlite"), "--data-dir", str(data_dir)),
                          env=_env(_isolated_home), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr


def _wait_for_rows(proc: subprocess.Popen[bytes], store: Path, n: int) -> None:
    deadline = time.monotonic() + 120
    while len(_rows(store)) < n:
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"eval exited early ({proc.returncode}): {err.decode()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"fewer than {n} rows written within 120 s")
        time.sleep(0.05)


def _default_sigint() -> None:
    """In the child before exec: SIGINT at its default, as for a command run at a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_says_the_run_is_saved_and_resumable(tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    """Ctrl-C used to end `lemon eval` with exit 130 and not a word; now one line says what is kept.

    Deterministic: after 2 calls the scripted workers wait while `hold` exists, so the run cannot finish
    before the interrupt (it did on a loaded machine when the test waited for time)."""
    store, hold = tmp_path / "results.sqlite", tmp_path / "hold"
    hold.touch()
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", latency_s=0.0,
                              hold=f"hold_file: '{hold}', hold_after_calls: 2")
    cmd = _cli("eval", "multiarith", "--method", "vanilla", "--pool", str(pool), "--level", "small",
               "--limit", "20", "--store", str(store), "--data-dir", str(data_dir), "--concurrency", "1")
    # PYTHONFAULTHANDLER: if the interrupted run ever hangs, SIGABRT makes it print every thread's stack.
    # preexec_fn: Ctrl-C at a terminal reaches a process whose SIGINT is at its default; a suite started as a
    # background job without job control (`nohup pytest &`) inherits SIGINT ignored, and so would the run,
    # which then (rightly, as a background job) sat through the interrupt: that was this test's "flake".
    proc = subprocess.Popen(cmd, env={**_env(_isolated_home), "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_default_sigint)
    try:
        _wait_for_rows(proc, store, 2)
        os.kill(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"no exit 60 s after SIGINT; the stacks it printed on SIGABRT:\n{err.decode()[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = err.decode()
    assert proc.returncode == 130, stderr[-2000:]
    said = [line for line in stderr.splitlines() if "interrupted" in line]
    assert said == ["interrupted: every finished item is saved in the results store; re-run the same command to "
                    "resume"], stderr[-2000:]
    assert "Traceback" not in stderr and "Aborted" not in stderr
    kept = len(_rows(store))
    assert kept == 2
    hold.unlink()
    done = subprocess.run(cmd, env=_env(_isolated_home), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and f"resumed {kept}" in done.stdout, done.stderr[-2000:]
    assert len(_rows(store)) == 20


def test_a_larger_limit_extends_the_run(tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    store = tmp_path / "results.sqlite"
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", latency_s=0.0)
    args = ("eval", "multiarith", "--method", "vanilla", "--pool", str(pool), "--level", "small",
            "--store", str(store), "--data-dir", str(data_dir))
    first = subprocess.run(_cli(*args, "--limit", "2"), env=_env(_isolated_home), capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    more = subprocess.run(_cli(*args, "--limit", "4"), env=_env(_isolated_home), capture_output=True, text=True,
                          timeout=300)
    assert more.returncode == 0, more.stderr[-2000:]
    db = sqlite3.connect(store)
    runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    db.close()
    assert runs == 1 and "computed 2, resumed 2" in more.stdout
    fewer = subprocess.run(_cli(*args, "--limit", "3"), env=_env(_isolated_home), capture_output=True, text=True,
                           timeout=300)
    assert fewer.returncode == 0 and "computed 0, resumed 3" in fewer.stdout, fewer.stdout[-2000:]
    other = subprocess.run(_cli(*args[:-4], "--limit", "4", "--seeds", "1", "--temperature", "0.3",
                                *args[-4:]), env=_env(_isolated_home), capture_output=True, text=True, timeout=300)
    assert other.returncode == 0 and "computed 4, resumed 0" in other.stdout, other.stdout[-2000:]


def _max_tokens_of_runs(store: Path) -> list[object]:
    db = sqlite3.connect(store)
    try:
        return sorted((json.loads(r[0]).get("max_tokens") for r in db.execute("SELECT config_json FROM runs")),
                      key=str)
    finally:
        db.close()


def test_aqua_workers_get_the_benchmarks_reply_length_and_an_explicit_limit_finds_the_old_runs(
        tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    """At 384 tokens half of AQuA's CoT replies were cut (docs/results.md): `lemon eval aqua` gives its workers
    the benchmark's 1,024 unless told otherwise, and an explicit limit is the run's identity as before."""
    store = tmp_path / "results.sqlite"
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", latency_s=0.0)
    args = ("eval", "aqua", "--method", "vanilla", "--pool", str(pool), "--level", "small", "--limit", "1",
            "--store", str(store), "--data-dir", str(data_dir))
    for extra in ((), ("--max-tokens", "1024"), ("--max-tokens", "32")):
        done = subprocess.run(_cli(*args, *extra), env=_env(_isolated_home), capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    # the first two are one run (1,024 either way); the pool's own default (32) is stored as None, as before
    assert _max_tokens_of_runs(store) == [1024, None]
    multiarith = subprocess.run(_cli(*args[:1], "multiarith", *args[2:]), env=_env(_isolated_home),
                                capture_output=True, text=True, timeout=300)
    assert multiarith.returncode == 0, multiarith.stderr[-2000:]
    assert _max_tokens_of_runs(store) == [1024, 384, None]


@pytest.mark.parametrize(("method", "flag", "gpu", "served"), [
    ("trained:/some/policy", None, True, True),  # torch on a GPU beside a CUDA llama.cpp: served by default
    ("trained:/some/policy", None, False, False),  # on the CPU the embedded backend stays (measured faster)
    ("cot", None, True, False),  # no torch in the process: nothing to keep apart
    ("trained:/some/policy", False, True, False),  # --embedded-workers refuses it
    ("cot", True, False, True),  # --serve-workers forces it
    ("trained:/some/policy.gguf", None, True, False),  # a .gguf policy runs in llama.cpp: no torch
])
def test_eval_serves_its_workers_by_default_only_beside_torch_on_a_gpu(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, method: str, flag: bool | None, gpu: bool,
        served: bool) -> None:
    """`lemon eval`'s `--serve-workers/--embedded-workers` default, with a test double for `workers_for` (the real
    servers: tests/train/test_served_workers.py) and for whether torch sees a GPU."""
    import contextlib

    from lemon.api import eval as api_evaluate
    from lemon.evaluation.methods import resolve_method

    asked: list[tuple[str, bool, Path]] = []

    @contextlib.contextmanager
    def recording_workers_for(pool: str, serve: bool, work_dir: Path):  # type: ignore[no-untyped-def]
        asked.append((pool, serve, work_dir))
        yield pool

    monkeypatch.setenv("LEMON_HOME", str(tmp_path))
    monkeypatch.setattr("lemon.llm.serve.workers_for", recording_workers_for)
    monkeypatch.setattr(api_evaluate, "torch_sees_a_gpu", lambda: gpu)
    with api_evaluate.eval_workers("tiny", resolve_method(method), flag) as pool:
        assert pool == "tiny"
    assert asked == [("tiny", served, tmp_path / "served" / "tiny")]  # lemon serve's folder: one served file
