"""The update: `optim.epochs` optimiser steps on a step's batch, and how far the weights moved."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch

from lemon.llm.constrained import SpecDecoding
from lemon.train.accumulate import Memo, accumulate
from lemon.train.batch import StepBatch
from lemon.train.config import TrainConfig
from lemon.train.distributed import Distributed
from lemon.train.policy_handle import Reference


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


# Elements of the trainable weights the weight-change monitor copies before a step (4 MiB in fp32).
WATCHED_ELEMENTS = 1 << 20


def watched_weights(params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Every k-th element of each trainable tensor (this process's shard under FSDP), flattened views, with
    k chosen so that at most ~`WATCHED_ELEMENTS` are watched: all of them for LoRA or a small policy.

    Why not all: `policy_update` copied every trainable weight each step to measure how far the policy
    moved, which doubles the weights' memory on a full fine-tune (a 7B policy: 28 GB more in fp32).
    """
    local = [p.to_local() if hasattr(p, "to_local") else p for p in params]
    stride = max(1, -(-sum(p.numel() for p in local) // WATCHED_ELEMENTS))
    return [p.detach().reshape(-1)[::stride] for p in local]


def _relative_change(before: Sequence[torch.Tensor], after: Sequence[torch.Tensor], dist: Distributed) -> float:
    """||after - before|| / ||before|| over the watched weights (the 'did the policy move' number), summed
    over the shards of every process under FSDP."""
    # Per-tensor fp32 norms (one pass each), squared and summed in Python floats: a fp64 copy of every
    # tensor cost ~2.5 s per step on SmolLM2 on 2 cores, for a monitor that needs 3 digits.
    num2 = sum(float(torch.linalg.vector_norm(a - b)) ** 2 for a, b in zip(after, before, strict=True))
    den2 = sum(float(torch.linalg.vector_norm(b)) ** 2 for b in before)
    if dist.sharded:
        num2, den2 = dist.all_sum([num2, den2])
    return math.sqrt(num2 / den2) if den2 > 0 else math.sqrt(num2)


@contextlib.contextmanager
def scoring_mode(model: torch.nn.Module, checkpointing: bool) -> Iterator[None]:
    """The mode the loss is computed in: no dropout, like generation (review item 6).

    Plain eval mode, except with gradient checkpointing, which transformers applies only in training mode:
    then the model is in training mode with every dropout module switched off.
    """
    was_training = model.training
    try:
        if checkpointing:
            model.train()
            for m in model.modules():
                if isinstance(m, torch.nn.Dropout):
                    m.eval()
        else:
            model.eval()
        yield
    finally:
        model.train(was_training)


def policy_update(model: torch.nn.Module, batch: StepBatch, optimizer: torch.optim.Optimizer, cfg: TrainConfig,
                  pad_id: int, reference: Reference | None = None, dist: Distributed | None = None,
                  decoding: SpecDecoding | None = None) -> dict[str, float]:
    """`optim.epochs` optimiser steps on the batch; returns loss parts, KL, grad norm and the weight change.

    The forward runs without dropout (LoRA dropout included): the completions were sampled without it, and
    the loss must score the distribution that sampled them. A batch without signal (every advantage and Δ
    zero, on every process) takes no step at all, even with a KL term: Adam's momentum would otherwise keep
    moving the policy on batches that say nothing (review item 7). Nor does a batch whose reward terms push
    the logits less than `optim.min_signal` (Δs on spans written with p ~ 1: signal the policy cannot act on;
    the KL term is not a reason to step), or whose gradient is below `optim.min_grad_norm`. Loss, KL and
    entropy are those of the first epoch (the sampling policy), summed over processes. `decoding`: the spec
    grammar the completions were sampled under (`accumulate` scores the masked distribution).
    """
    dist = dist or Distributed()
    stats = {"loss_pg": 0.0, "loss_cf": 0.0, "kl": 0.0, "entropy": 0.0, "grad_norm": 0.0, "updated": 0.0,
             "weight_change": 0.0, "cf_span_p": 0.0, "cf_span_tokens": 0.0, "signal": 0.0}
    signal, n_tokens = dist.all_sum([float(batch.has_signal()), float(sum(len(c) for c in batch.completions))])
    if signal == 0 or n_tokens == 0:
        del stats["cf_span_p"]
        return stats
    params = trainable(model)
    before = [w.clone() for w in watched_weights(params)]
    memo, stepped = Memo(), False
    with scoring_mode(model, cfg.optim.gradient_checkpointing):
        for epoch in range(cfg.optim.epochs):
            optimizer.zero_grad(set_to_none=True)
            accumulate(model, batch, cfg, pad_id, reference if cfg.credit.kl_beta > 0 else None,
                        stats if epoch == 0 else None, n_tokens, dist, memo, first=epoch == 0, decoding=decoding)
            norm = dist.clip_grad_norm(params, cfg.optim.max_grad_norm)
            if epoch == 0:  # norm and signal are totals over every process: all skip together
                stats["grad_norm"], stats["signal"] = norm, dist.all_sum([stats["signal"]])[0]
                stepped = norm >= cfg.optim.min_grad_norm and stats["signal"] >= cfg.optim.min_signal
                if not stepped:
                    break
            optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    keys = ("loss_pg", "loss_cf", "kl", "entropy", "cf_span_p", "cf_span_tokens")
    for key, total in zip(keys, dist.all_sum([stats[k] for k in keys]), strict=True):
        stats[key] = total
    # Mean probability of the credited tokens: the counterfactual gradient on a token is A * (onehot - p),
    # so a span the policy already writes with p ~ 1 cannot move, whatever its Δ (issue 10's CPU run).
    if stats["cf_span_tokens"]:
        stats["cf_span_p"] /= stats["cf_span_tokens"]
    else:  # no span credit this step: no probability to report (a 0 would read as "credit had all the room")
        del stats["cf_span_p"]
    stats["weight_change"] = _relative_change(before, watched_weights(params), dist)
    stats["updated"] = float(stepped)
    return stats
