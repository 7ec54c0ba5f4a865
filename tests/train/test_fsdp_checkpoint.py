"""Checkpoints under FSDP (issue 25): every process takes part in gathering the weights and the optimizer state
from the shards, the main process writes them whole, and a resumed run gets the optimizer state back.

Before, only the main process saved, from its own shards: transformers failed on the sharded tensors
("Attempted to access the data pointer on an invalid python storage") and the other process never reached
the save. The worker (`tests/train/fsdp_worker.py`) shards a tiny random Llama over 2 CPU processes (gloo,
FSDP2), with and without LoRA, takes an AdamW step, then runs the real `Trainer.save`, `export_trained` and
`Trainer.restore` on both.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.train
import torch  # noqa: E402  (the test command installs the train extra: a missing torch fails, never skips)
from safetensors.torch import load_file  # noqa: E402

WORKER = Path(__file__).with_name("fsdp_worker.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("fsdp")
    root = Path(__file__).parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(WORKER),
           str(out)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return [torch.load(out / f"rank-{r}.pt", weights_only=False) for r in (0, 1)]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a, b))


def test_a_full_checkpoint_holds_the_whole_weights_and_optimizer_state(ranks: list[dict[str, Any]]) -> None:
    r0, r1 = ranks[0]["full"], ranks[1]["full"]
    assert r0["checkpoint"] == r1["checkpoint"]  # every process got the main one's path
    saved = load_file(str(Path(r0["checkpoint"]) / "model.safetensors"))
    assert set(saved) == set(r0["params"])
    assert all(_same(saved[k], v) for k, v in r0["params"].items())
    final = load_file(str(Path(r0["final"]) / "model.safetensors"))
    assert all(_same(final[k], v) for k, v in r0["params"].items())
    optim = torch.load(Path(r0["checkpoint"]) / "optimizer.pt", weights_only=True)
    assert {k: tuple(v["exp_avg"].shape) for k, v in optim["state"].items()} == {
        k: tuple(v.shape) for k, v in r0["params"].items()}


def test_a_resumed_run_gets_every_shards_optimizer_state_back(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        for case in ("full", "lora"):
            got, want = r[case]["restored_exp_avg"], r[case]["exp_avg"]
            assert len(got) == len(want) > 0 and all(_same(a, b) for a, b in zip(got, want, strict=True))
            assert r[case]["next_step"] == 2


def test_a_lora_checkpoint_holds_the_adapter_and_the_final_policy_is_merged(ranks: list[dict[str, Any]]) -> None:
    r0 = ranks[0]["lora"]
    adapter = load_file(str(Path(r0["checkpoint"]) / "adapter_model.safetensors"))
    assert {k.replace(".default", "") for k in r0["params"]} == set(adapter)
    assert all(_same(adapter[k.replace(".default", "")], v) for k, v in r0["params"].items())
    final = load_file(str(Path(r0["final"]) / "model.safetensors"))
    layer = "model.layers.0.self_attn"
    a = r0["params"][f"base_model.model.{layer}.q_proj.lora_A.default.weight"]
    b = r0["params"][f"base_model.model.{layer}.q_proj.lora_B.default.weight"]
    base = _base_weight(f"{layer}.q_proj.weight")
    assert torch.allclose(final[f"{layer}.q_proj.weight"], base + 2.0 * (b @ a), atol=1e-6)  # alpha / r = 2
    assert _same(final[f"{layer}.k_proj.weight"], _base_weight(f"{layer}.k_proj.weight"))


def _base_weight(name: str) -> torch.Tensor:
    from tests.train.fsdp_worker import tiny_base

    return dict(tiny_base().named_parameters())[name].detach()
