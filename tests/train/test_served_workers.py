"""Workers served out of process (issue 25): with `--serve-workers` the trainer's process never imports
llama.cpp, while its rollouts still call the worker models (through the served pool's OpenAI-compatible
levels). On a GPU that is what keeps `lemon train` alive: a CUDA llama.cpp and CUDA torch crash one process.

Each run is a real subprocess (`no_llama_runner.py`) that records every attempt to import `llama_cpp`; the
control runs an embedded pool the same way and must show the import, so the watcher is known to see it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.train, pytest.mark.models, pytest.mark.server]

from lemon.llm.serve import _answers  # noqa: E402
from tests.llm.servers import free_port  # noqa: E402
from tests.train.test_train_e2e import warm_policy  # noqa: E402, F401  (the fixture: a few seconds of SFT)

RUNNER = Path(__file__).with_name("no_llama_runner.py")
ROOT = Path(__file__).parents[2]


def _lemon(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    from tests.benchdata import find_data_dir

    full = {**os.environ, "LEMON_HOME": str(home), "LEMON_DATA_DIR": str(find_data_dir()), "COLUMNS": "160",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), **env}
    return subprocess.run([sys.executable, str(RUNNER), *args], env=full, capture_output=True, text=True,
                          timeout=900, stdin=subprocess.DEVNULL)


def test_training_with_served_workers_never_imports_llama_cpp(tmp_path: Path, warm_policy: Path,  # noqa: F811
                                                              _isolated_home: Path) -> None:
    port = free_port()
    run = tmp_path / "run"
    res = _lemon(_isolated_home, "train", "--out", str(run), "--benchmark", "gsm8k", "--pool", "tiny", "--policy",
                 str(warm_policy), "--limit", "2", "--tasks-per-step", "1", "--group-size", "2",
                 "--policy-max-tokens", "96", "--kl-beta", "0", "--steps", "1", "--no-cache", "--serve-workers",
                 LEMON_WORKER_PORT=str(port))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert "LLAMA_CPP_IMPORTS=[] LOADED=False" in res.stdout
    (row,) = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert row["rollout_tokens"] > 0, "no worker was called: the served path went untested"
    assert (run / "workers" / f"smollm2-135m-{port}.log").stat().st_size > 0
    assert not _answers(f"http://127.0.0.1:{port}/v1")  # stopped with the run


def test_evaluating_a_trained_policy_with_served_workers_never_imports_llama_cpp(
        tmp_path: Path, warm_policy: Path, _isolated_home: Path) -> None:  # noqa: F811
    """`lemon eval --method trained:DIR`: torch writes the spec, and on a GPU a CUDA llama.cpp in the same
    process would crash it; with `--serve-workers` the items are answered by the served pool, whose file is
    `lemon serve`'s (one run whichever way its workers were started)."""
    port = free_port()
    store = tmp_path / "r.sqlite"
    res = _lemon(_isolated_home, "eval", "gsm8k", "--method", f"trained:{warm_policy}", "--pool", "tiny",
                 "--limit", "1", "--max-tokens", "16", "--no-cache", "--store", str(store), "--serve-workers",
                 LEMON_WORKER_PORT=str(port))
    assert res.returncode in (0, 3), res.stdout[-2000:] + res.stderr[-3000:]
    assert "LLAMA_CPP_IMPORTS=[] LOADED=False" in res.stdout
    served = _isolated_home / "served" / "tiny"
    assert (served / f"smollm2-135m-{port}.log").stat().st_size > 0
    assert f"127.0.0.1:{port}" in (served / "pool.yaml").read_text()
    with sqlite3.connect(store) as db:
        (tokens,) = db.execute("SELECT SUM(total_tokens) FROM items").fetchone()
    assert tokens > 0, "no worker was called: the served path went untested"
    assert not _answers(f"http://127.0.0.1:{port}/v1")  # stopped with the evaluation


def test_the_watcher_sees_an_embedded_pool_import_llama_cpp(tmp_path: Path, _isolated_home: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("agents:\n  - {name: solver, role: math_solver, duty: '', capacity: small, depends_on: []}\n"
                    "output: solver\n")
    res = _lemon(_isolated_home, "exec", str(spec), "What is 2 + 2?", "--pool", "tiny", "--max-tokens", "8",
                 "--no-cache")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "LOADED=True" in res.stdout and "'llama_cpp'" in res.stdout
