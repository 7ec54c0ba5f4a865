"""Data-parallel training in 2 real processes (gloo, started by `accelerate launch`) equals one process.

The worker (`tests/train/ddp_worker.py`) runs (A) one `policy_update` per process on its half of a fixed
batch of a tiny random Llama (KL, 2 epochs with the clipped ratio, micro-batches, each process scoring its
groups' prompts once), and (B) two steps of the real `Trainer` on the simulated environment (`SlotPolicy`
and the simulated pool, named test doubles), each process generating and rolling out its share of the
tasks. Tolerance: 1e-6 absolute on every parameter (fp32, SGD; the processes sum gradients in another order
than one process does; measured differences were 6e-8 for A and 1e-9 for B, for steps of ~3e-2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.train
import accelerate  # noqa: E402, F401
import torch  # noqa: E402  (the test command installs the train extra: a missing torch fails, never skips)
import transformers  # noqa: E402, F401

from lemon.errors import ConfigError  # noqa: E402
from lemon.train.distributed import Distributed, check_shares  # noqa: E402
from tests.train.ddp_worker import fixed_batch, run_update  # noqa: E402

TOL = 1e-6
WORKER = Path(__file__).with_name("ddp_worker.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
           "0", str(WORKER), str(out)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return [torch.load(out / f"rank-{r}.pt", weights_only=False) for r in (0, 1)]


def _max_diff(a: list[Any], b: list[Any]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def test_two_processes_run_as_two_ranks(ranks: list[dict[str, Any]]) -> None:
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["world"] == 2 for r in ranks)


def test_one_update_in_two_processes_equals_one_process_over_the_batch(ranks: list[dict[str, Any]]) -> None:
    torch.set_num_threads(1)
    single, stats = run_update(fixed_batch())
    moved = max(float((p - q).abs().max()) for p, q in zip(single, _start_params(), strict=True))
    assert moved > 100 * TOL, "the update did not move the policy: the comparison would be empty"
    for r in ranks:
        assert _max_diff(r["a_params"], single) < TOL
        # loss parts are sums over processes of their share of the GLOBAL token mean
        for key in ("loss_pg", "loss_cf", "kl", "entropy"):
            assert r["a_stats"][key] == pytest.approx(stats[key], rel=1e-5, abs=1e-7)


def _start_params() -> list[Any]:
    from tests.train.ddp_worker import tiny_llama

    return [p.detach().clone() for p in tiny_llama().parameters()]


def test_trainer_steps_in_two_processes_equal_one_process_over_the_gathered_batches(
        ranks: list[dict[str, Any]]) -> None:
    r0, r1 = ranks[0]["b"], ranks[1]["b"]
    assert r0["local_tasks"] == r1["local_tasks"] == [8, 8]  # 2 of the 4 tasks x group 4, per process
    assert _max_diff(r0["params"], r1["params"]) == 0.0  # the ranks hold one policy
    assert _max_diff(r0["params"], r0["replayed"]) < TOL
    assert r0["sampler"] == r1["sampler"]  # the adaptive sampler saw every process's deltas, in task order
    for row0, row1 in zip(r0["rows"], r1["rows"], strict=True):
        # the same metrics on both ranks (seconds are each process's own)
        assert {k: v for k, v in row0.items() if not k.endswith("_s")} == \
            {k: v for k, v in row1.items() if not k.endswith("_s")}
        assert row0["processes"] == 2 and len(row0["task_ids"]) == 4 and row0["updated"] == 1.0


def test_shares_must_be_equal() -> None:
    check_shares(4, 2)
    with pytest.raises(ConfigError, match="multiple of the 2 processes"):
        check_shares(3, 2)


def test_one_process_is_the_identity() -> None:
    d = Distributed()
    assert (d.rank, d.world, d.is_main, d.loss_scale) == (0, 1, True, 1.0)
    assert d.shard([1, 2, 3]) == [1, 2, 3] and d.gather([1, 2, 3]) == [1, 2, 3]
    assert d.all_sum([1.5, 2.0]) == [1.5, 2.0]


SCRIPTED_POOL = """name: scripted
levels:
  - {name: small, backend: scripted, model: s}
  - {name: medium, backend: scripted, model: m}
  - {name: large, backend: scripted, model: l}
"""


@pytest.mark.models
def test_lemon_train_runs_under_accelerate_launch(tmp_path: Path, policy_dir: Path) -> None:
    """The documented launch line: two CPU processes, the real SmolLM2 policy, workers from a scripted pool
    (a test double); one process writes the run, both train (one step, two tasks, one per process)."""
    from tests.benchdata import find_data_dir

    pool = tmp_path / "pool.yaml"
    pool.write_text(SCRIPTED_POOL)
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "CUDA_VISIBLE_DEVICES": "",
           "LEMON_DATA_DIR": str(find_data_dir()), "LEMON_HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
           "-m", "lemon.cli.main", "train", "--run-dir", str(run), "--benchmark", "gsm8k", "--pool", str(pool),
           "--policy", str(policy_dir), "--limit-tasks", "2", "--tasks-per-step", "2", "--group-size", "2",
           "--max-new-tokens", "16", "--kl-beta", "0", "--steps", "1", "--save-every", "1", "--no-cache",
           "--threads", "1"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["processes"] == 2 and len(rows[0]["task_ids"]) == 2
    assert len((run / "samples.jsonl").read_text().splitlines()) == 4  # 2 tasks x group 2, both processes'
    assert (run / "checkpoints" / "step-000001" / "COMPLETE").is_file()
    assert (run / "final" / "config.json").is_file()
