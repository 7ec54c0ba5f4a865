"""Checkpoints and the final export: what a step N checkpoint holds, and the policy as a plain HF directory."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import torch

from lemon.train.distributed import Distributed
from lemon.train.policy_handle import HFPolicy, PolicyHandle
from lemon.train.run_dir import RunDir
from lemon.train.sampler import AdaptiveFamilySampler


def save_checkpoint(run: RunDir, step: int, keep: int, policy: PolicyHandle, sampler: AdaptiveFamilySampler,
                    weights: dict[str, torch.Tensor] | None, optim: dict[str, object]) -> Path:
    """Write step `step`'s checkpoint (the policy, the optimizer state, the step and the adaptive sampler's
    state) atomically, keeping the last `keep`. `weights`: the state gathered from FSDP shards, else None."""
    tmp = run.new_checkpoint(step)
    if weights is None:
        policy.save(tmp)
    else:
        policy.save(tmp, weights)
    torch.save(optim, tmp / "optimizer.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, "sampler": sampler.state_dict()}),
                                            encoding="utf-8")
    return run.commit_checkpoint(tmp, step, keep)


def restore_checkpoint(checkpoint: Path, dist: Distributed, model: torch.nn.Module,
                       optimizer: torch.optim.Optimizer, sampler: AdaptiveFamilySampler) -> int:
    """Load the optimizer and sampler state of a checkpoint (the model was loaded from it); the next step.
    Under FSDP the main process reads the optimizer file and every shard takes its part."""
    optim = {} if dist.sharded and not dist.is_main else torch.load(checkpoint / "optimizer.pt", weights_only=True)
    dist.load_optimizer_state(model, optimizer, optim)
    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    sampler.load_state_dict(state["sampler"])
    return int(state["step"]) + 1


def export_policy(policy: HFPolicy | PolicyHandle, dist: Distributed, model: torch.nn.Module,
                  target: Path) -> Path:
    """The run's final policy as a plain HF directory. EVERY process calls it: under FSDP the weights are
    gathered from all shards of `model` (the engine-wrapped policy) first; the main process writes."""
    weights = dist.model_state(model)
    dist.on_main(lambda: export_final(policy, target, weights))
    return target


def gathered_copy(policy: HFPolicy, weights: dict[str, torch.Tensor]) -> HFPolicy:
    """A CPU policy of the same architecture (and adapter) holding `weights`, the state gathered from FSDP
    shards: the live module holds only this process's shards, so it cannot be merged or saved itself.
    Built on the meta device and filled by assignment, so the weights are not copied a second time."""
    from transformers import AutoModelForCausalLM

    live = policy.model
    base = live.get_base_model() if hasattr(live, "get_base_model") else live
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(base.config)
        if hasattr(live, "peft_config"):
            from peft import get_peft_model

            model = get_peft_model(model, live.peft_config["default"])
    model.load_state_dict(weights, assign=True)
    model.tie_weights()
    return HFPolicy(model, policy.tokenizer, prompt_style=policy.prompt_style)


def export_final(policy: HFPolicy | PolicyHandle, target: Path,
                 weights: dict[str, torch.Tensor] | None = None) -> None:
    """Save the trained policy as a plain HF directory (LoRA merged), atomically; `weights`: the state
    gathered from FSDP shards (`Distributed.model_state`)."""
    tmp = target.with_name(f".{target.name}-tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if weights is not None:
        assert isinstance(policy, HFPolicy), "only an HF policy is ever sharded"
        policy = gathered_copy(policy, weights)
    model = policy.model
    if hasattr(model, "merge_and_unload"):
        policy = HFPolicy(copy.deepcopy(model).merge_and_unload(), policy.tokenizer,  # type: ignore[union-attr]
                          prompt_style=policy.prompt_style)
    policy.save(tmp)
    if target.exists():
        shutil.rmtree(target)
    os.rename(tmp, target)
