"""One process of the 2-process (gloo) data-parallel check; started by tests/train/test_distributed.py with
`accelerate launch --multi_gpu --num_processes 2` (on a machine without GPUs that is 2 CPU processes, gloo).

Part A: `policy_update` on a tiny random Llama, each process on its half of a fixed batch (KL to a frozen
reference, 2 epochs with the clipped ratio, 2 micro-batches). Part B: 2 steps of the real `Trainer` on the
simulated environment (the `SlotPolicy` test double); each step's local batches are gathered and replayed
by ONE process on a copy of the starting policy. Each rank saves what the test compares to `OUT/rank-R.pt`.
"""

from __future__ import annotations

import asyncio
import copy
import sys
from pathlib import Path
from typing import Any

import torch

from lemon.train.batch import StepBatch
from lemon.train.config import TrainConfig
from lemon.train.credit import CounterfactualTerm
from lemon.train.distributed import open_distributed
from lemon.train.grpo import Trainer
from lemon.train.policy_handle import Reference
from lemon.train.simulate import simulated_trainer
from lemon.train.update import policy_update

# SGD, so the parameters after a step are linear in the gradient: Adam divides by |g|, which blows the rounding
# of a near-zero gradient element (summed in another order) up to the size of a whole step.
LR = 0.5


def tiny_llama() -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    return transformers.LlamaForCausalLM(config)


def fixed_batch() -> StepBatch:
    """8 sequences of different completion lengths, so the two halves hold unequal token counts; each process's
    half is two groups of 2 rows sharing a prompt (scored once, `shared_prompt_logprobs`), while one process
    over the whole batch sees no two consecutive rows with one prompt (scored row by row)."""
    lengths = [3, 9, 5, 12, 2, 7, 11, 4]
    group = [(i % 2) + 2 * (i // 4) for i in range(8)]  # 0 1 0 1 2 3 2 3
    return StepBatch(
        prompts=[[1 + (3 * g + j) % 60 for j in range(2 + g)] for g in group],
        completions=[[3 + (5 * i + j) % 60 for j in range(n)] for i, n in enumerate(lengths)],
        advantages=[0.9, -0.3, 0.5, -0.8, 0.1, 0.0, -0.4, 0.7],
        cf_terms=[[CounterfactualTerm((0, 1), 0.6)] if i % 3 == 0 else [] for i in range(8)])


def update_config() -> TrainConfig:
    return TrainConfig.model_validate({"credit": {"kl_beta": 0.04}, "optim": {"lr": LR, "epochs": 2,
                                                                              "micro_batch": 2}})


def run_update(batch: StepBatch, dist: Any = None) -> tuple[list[torch.Tensor], dict[str, float]]:
    """One `policy_update` from the fixed starting model; the parameters after it and the stats."""
    model = tiny_llama()
    ref = Reference(model, copy.deepcopy(model).eval().requires_grad_(False))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    wrapped, opt = (model, opt) if dist is None else dist.prepare(model, opt)
    stats = policy_update(wrapped, batch, opt, update_config(), 0, ref, dist)
    return [p.detach().clone() for p in model.parameters()], stats


def shard_batch(batch: StepBatch, dist: Any) -> StepBatch:
    return StepBatch(*(dist.shard(getattr(batch, f)) for f in ("prompts", "completions", "advantages",
                                                                "cf_terms")))


class RecordingTrainer(Trainer):
    """The real trainer, keeping each step's local batch (to replay the step on one process)."""

    batches: list[StepBatch]

    def update(self, batch: StepBatch) -> dict[str, float]:
        self.batches.append(batch)
        return super().update(batch)


def simulated(dist: Any) -> RecordingTrainer:
    base = simulated_trainer(seed=3, cf=True, lr=0.05, tasks_per_step=4, group_size=4)
    trainer = RecordingTrainer(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    trainer.batches = []
    trainer.dist = dist
    trainer.optimizer = torch.optim.SGD(trainer.policy.model.parameters(), lr=LR)
    trainer.update_model, trainer.optimizer = dist.prepare(trainer.policy.model, trainer.optimizer)
    return trainer


def replay(start: torch.nn.Module, batches: list[StepBatch], cfg: TrainConfig) -> list[torch.Tensor]:
    """One process: the same steps over the concatenated batches of all processes."""
    opt = torch.optim.SGD(start.parameters(), lr=LR)
    for b in batches:
        policy_update(start, b, opt, cfg, 0)
    return [p.detach().clone() for p in start.parameters()]


async def part_b(dist: Any) -> dict[str, Any]:
    trainer = simulated(dist)
    start = copy.deepcopy(trainer.policy.model)
    rows = [await trainer.step(step) for step in (1, 2)]
    gathered = []
    for b in trainer.batches:
        parts = dist.all_objects(b)
        gathered.append(StepBatch(*([x for p in parts for x in getattr(p, f)]
                                    for f in ("prompts", "completions", "advantages", "cf_terms"))))
    return {"params": [p.detach().clone() for p in trainer.policy.model.parameters()],
            "replayed": replay(start, gathered, trainer.cfg), "rows": rows,
            "sampler": trainer.sampler.state_dict()["history"],
            "local_tasks": [len(b.completions) for b in trainer.batches]}


def main(out: Path) -> None:
    torch.set_num_threads(1)
    dist, _ = open_distributed("fp32")
    assert dist.world == 2, f"expected 2 processes, got {dist.world}"
    params, stats = run_update(shard_batch(fixed_batch(), dist), dist)
    result = {"rank": dist.rank, "world": dist.world, "a_params": params, "a_stats": stats,
              "b": asyncio.run(part_b(dist))}
    torch.save(result, out / f"rank-{dist.rank}.pt")
    dist.wait()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
