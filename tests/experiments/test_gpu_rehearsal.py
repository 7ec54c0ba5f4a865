"""The GPU plan rehearsed on this CPU (issue 25): `bash experiments/gpu.sh rehearse` runs every stage of
experiments/gpu.sh for real - pieces cut, carried and sha256-assembled, the computed wheel list verified, the
`tiny` pool served out of process, SFT, GRPO with and without counterfactual credit (LoRA, gradient
checkpointing, KL, 2 micro-batches), evaluation and the report - with the stage code the GPU runs, the workers
served by the carried llama-server. ~10 minutes on 2 cores: the one slow test that proves the plan before a GPU
session is spent on it."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.llm.servers import free_port

pytestmark = [pytest.mark.server, pytest.mark.models, pytest.mark.train]

ROOT = Path(__file__).parents[2]
STAGES = ("pack+carry", "wheels", "llama", "models", "policy", "sft", "train-cf", "train-global", "eval", "report")


def _closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_the_rehearsal_runs_every_stage_of_the_gpu_plan(tmp_path: Path, data_dir: Path) -> None:
    work = tmp_path / "rehearsal"
    worker_port, serve_port = free_port(), free_port()
    env = {**os.environ, "WORK": str(work), "LEMON_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT / "src"),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "LEMON_WORKER_PORT": str(worker_port), "SERVE_PORT": str(serve_port)}
    res = subprocess.run(["bash", str(ROOT / "experiments" / "gpu.sh"), "rehearse"], capture_output=True,
                         text=True, timeout=1500, env=env, cwd=ROOT)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    times = dict(re.findall(r"== stage (\S+): exit 0 after (\d+) s", (work / "stage-times.txt").read_text()))
    assert tuple(times) == STAGES
    assert "worker servers stopped" in res.stdout and _closed(serve_port) and _closed(worker_port)
    runs, out = work / "runs", work / "out"
    metrics = {}
    for arm in ("cf", "global"):  # GRPO drew valid specs, and stepped exactly where its batch had signal
        metrics[arm] = [json.loads(x) for x in (runs / arm / "metrics.jsonl").read_text().splitlines()]
        assert metrics[arm] and all(r["valid_rate"] > 0 for r in metrics[arm])
        recorded = json.loads((runs / arm / "run.json").read_text())
        run, optim = recorded["settings"], recorded["config"]["optim"]
        assert run["lora"] and run["cf"] == (arm == "cf") and run["pool"] == "tiny"
        assert optim["gradient_checkpointing"] and optim["micro_batch"] == 2
        assert (out / f"adapter-{arm}.safetensors").stat().st_size > 0
    # +CF: a counterfactual edit of a valid spec changes its structure or spec cost, so the LoRA + checkpointing
    # + KL update over 2 micro-batches runs for certain (rehearsal.yaml: floors at 0). Global-only steps iff a
    # group's sampled specs differ (the 135M policy sometimes writes one spec 4 times: a tie, no step).
    assert all(r["updated"] == 1.0 for r in metrics["cf"])
    assert all(r["updated"] == float(r["groups_with_contrast"] > 0) for r in metrics["global"])
    # the served workers ran the specs (the global arm's same specs are LLM-cache hits) and a counterfactual
    assert any(r["worker_tokens"] > 0 and r["cf_count"] > 0 for r in metrics["cf"])
    assert not (runs / "sft" / "workers").exists()  # the library teacher makes no model call: nothing served
    for pool_file in (runs / "cf" / "workers", work / "served"):  # every stage's workers were the carried
        served = (pool_file / "pool.yaml").read_text()  # llama-server's batched slots
        assert "model: smollm2-135m-llama-server" in served, served
    report = (out / "results-gpu.md").read_text()
    for method in ("cot", "vanilla", "trained:"):
        assert method in report
    assert json.loads((out / "gpu-steps.json").read_text())["cf"]["steps"] >= 1
