"""Prompt sharing: cut a step's rows into micro-batches so each group's prompt is scored once."""

from __future__ import annotations

from collections.abc import Sequence

from lemon.train.config import TrainConfig


def can_share_prompt(model: object, cfg: TrainConfig) -> bool:
    """Score a group's prompt once (`generation.shared_prompt_logprobs`): an HF model (a key/value cache),
    and no gradient checkpointing, under which transformers drops the cache."""
    return cfg.optim.share_prompt and not cfg.optim.gradient_checkpointing and hasattr(model, "config")


def micro_batches(prompts: Sequence[Sequence[int]], size: int, *, by_prompt: bool) -> list[slice]:
    """Consecutive rows, at most `size` each; with `by_prompt` also cut where the prompt changes, so a
    micro-batch is (part of) one group and its prompt runs once."""
    out: list[slice] = []
    start = 0
    for i in range(1, len(prompts) + 1):
        if i == len(prompts) or i - start == size or (by_prompt and list(prompts[i]) != list(prompts[start])):
            out.append(slice(start, i))
            start = i
    return out
