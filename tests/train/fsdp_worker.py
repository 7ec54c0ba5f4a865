"""One of 2 CPU processes (gloo) of the FSDP checkpoint check; started by tests/train/test_fsdp_checkpoint.py
with `torch.distributed.run --nproc_per_node 2`.

A tiny random Llama (full fine-tune, then with a LoRA adapter) is sharded with FSDP2 (`fully_shard`), takes
one AdamW step, and the REAL `Trainer.save` / `Trainer.restore` / `export_trained` run on both processes.
accelerate runs FSDP only on accelerators, so `Distributed` gets `FSDPStandIn`, a named test double of the
five things it reads of an `Accelerator`. Each rank writes what the test compares to `OUT/rank-R.pt`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist

from lemon.train.distributed import Distributed
from lemon.train.grpo import Trainer, export_trained
from lemon.train.policy_handle import HFPolicy
from lemon.train.run_dir import RunDir
from lemon.train.sampler import AdaptiveFamilySampler
from lemon.train.settings import TrainSettings, effective_config


class FSDPStandIn:
    """What `Distributed` reads of an accelerate `Accelerator` under FSDP: rank, world, type, device, barrier."""

    distributed_type = "FSDP"
    device = torch.device("cpu")

    def __init__(self) -> None:
        self.process_index = tdist.get_rank()
        self.num_processes = tdist.get_world_size()

    def wait_for_everyone(self) -> None:
        tdist.barrier()


class NoTokenizer:
    pad_token_id = 0

    def save_pretrained(self, path: str) -> None:
        (Path(path) / "tokenizer.txt").write_text("stand-in\n")


def tiny_base() -> torch.nn.Module:
    """The random tiny Llama every case starts from (seeded: the test rebuilds it to check the merge)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    return transformers.LlamaForCausalLM(config)


def sharded_model(lora: bool, source: Path | None = None) -> torch.nn.Module:
    """The tiny Llama (from `source`, a checkpoint, if given), LoRA-wrapped if asked, sharded over 2 ranks."""
    import transformers
    from torch.distributed.fsdp import fully_shard

    model: Any = tiny_base()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    elif source is not None:
        model = transformers.LlamaForCausalLM.from_pretrained(str(source))
    inner = model.get_base_model() if lora else model
    for layer in inner.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def trainer(model: torch.nn.Module, run_dir: Path, dist: Distributed) -> Trainer:
    settings = TrainSettings(run_dir=run_dir, keep_checkpoints=2)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.05)
    return Trainer(settings, effective_config(settings), HFPolicy(model, NoTokenizer()), None, None, [],  # type: ignore[arg-type]
                   opt, AdaptiveFamilySampler(seed=1), run=RunDir(run_dir) if dist.is_main else None,
                   dist=dist, update_model=model)


def full(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every trainable parameter, whole (a collective)."""
    return {n: p.full_tensor().detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def exp_avg(t: Trainer) -> list[torch.Tensor]:
    return [t.optimizer.state[p]["exp_avg"].full_tensor().clone() for g in t.optimizer.param_groups
            for p in g["params"]]


def case(out: Path, lora: bool, dist: Distributed) -> dict[str, Any]:
    model = sharded_model(lora)
    t = trainer(model, out / ("lora" if lora else "full"), dist)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    model(input_ids=ids, labels=ids).loss.backward()
    t.optimizer.step()
    ckpt = t.save(1)
    final = export_trained(t, out / ("lora" if lora else "full") / "final")
    # Resume as `lemon train --resume` does: a model loaded from the checkpoint (a LoRA run's base is
    # re-made; only the optimizer state is compared), sharded again, then the optimizer state restored.
    again = trainer(sharded_model(lora, None if lora else ckpt), out / "again", dist)
    nxt = again.restore(ckpt)
    return {"checkpoint": str(ckpt), "final": str(final), "params": full(model), "exp_avg": exp_avg(t),
            "restored_exp_avg": exp_avg(again), "next_step": nxt}


def main(out: Path) -> None:
    torch.set_num_threads(1)
    tdist.init_process_group("gloo")
    dist = Distributed(FSDPStandIn())
    result = {"rank": dist.rank, "full": case(out, False, dist), "lora": case(out, True, dist)}
    torch.save(result, out / f"rank-{dist.rank}.pt")
    tdist.barrier()
    tdist.destroy_process_group()
    # Leave without running C++ static destructors: in ~1 run in 10 on 2 CPU cores one of them found a thread
    # still joinable at interpreter exit and aborted ("terminate called without an active exception", SIGABRT,
    # no Python frame), after both ranks had written their results; a bare gloo all-reduce did not (30 runs).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
