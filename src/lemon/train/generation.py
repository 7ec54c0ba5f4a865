"""Batched generation and scoring of policy completions (HF `generate` and one teacher-forced forward).

Prompts are left-padded to one length P so that completion token i sits at position P+i in every row; the
loss helpers in `credit` rely on that shared P. The SAMPLED token ids are kept: a sampled completion need not
be the tokenizer's canonical tokenisation of its text, and credit must land on the tokens actually sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lemon.llm.constrained import SpecDecoding, unpack
from lemon.llm.hf import neutral_generation_config, stop_token_ids
from lemon.train.token_spans import offsets_from_token_ids


@dataclass(frozen=True)
class Completion:
    """One completion: its sampled ids (EOS included if it stopped), decoded text and per-token offsets.

    `text` and `offsets` cover the ids before the EOS; the EOS token itself is trained on (the policy learns
    to stop) but carries no character.
    """

    prompt_ids: list[int]
    ids: list[int]
    text: str
    offsets: list[tuple[int, int]]
    stopped: bool


def chat_prompt_ids(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """Token ids of the chat prompt, ending with the assistant header (generation starts right after)."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# One stop set for training and inference (lemon.llm.hf), re-exported under its training name.
eos_ids = stop_token_ids


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask) with every row left-padded to the longest."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(list(r), dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids, mask


def model_device(model: Any) -> torch.device:
    """Where the model's weights live (CPU, or the GPU `load_policy` put them on)."""
    return next(model.parameters()).device


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding (what `generate` uses), so training scores what was sampled."""
    pos = mask.long().cumsum(-1) - 1
    return pos.clamp(min=0)


@torch.no_grad()
def generate(model: Any, tokenizer: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
             temperature: float, top_p: float = 1.0, seed: int | None = None,
             batch_size: int = 8, synced_gpus: bool = False, share_prompt: bool = False,
             decoding: SpecDecoding | None = None) -> list[Completion]:
    """One completion per prompt row; temperature 0 = greedy. Rows are generated in batches.

    `share_prompt`: rows of a batch that repeat a prompt (a GRPO group) prefill it once (`shared_prefill`).
    `decoding`: sample under the spec grammar (each row's forbidden tokens masked; `lemon.llm.constrained`).
    """
    stop = eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(stop))
    if seed is not None:
        torch.manual_seed(seed)
    out: list[Completion] = []
    was_training = model.training
    model.eval()
    try:
        for b in range(0, len(prompts), batch_size):
            rows = prompts[b:b + batch_size]
            ids, mask = (t.to(model_device(model)) for t in left_pad(rows, pad))
            kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": pad,
                                      "eos_token_id": sorted(stop)}
            if synced_gpus:
                kwargs["synced_gpus"] = True
            if decoding is not None:
                from transformers import LogitsProcessorList

                kwargs["logits_processor"] = LogitsProcessorList([decoding.processor(len(rows))])
            cache = shared_prefill(model, rows, pad) if share_prompt else None
            if cache is not None:
                kwargs["past_key_values"] = cache
            if temperature > 0:
                kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
            else:
                kwargs.update(do_sample=False)
            with neutral_generation_config(model):  # the loss scores raw logits: so must sampling
                gen = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
            new = gen[:, ids.shape[1]:].tolist()
            for prompt, row in zip(rows, new, strict=True):
                cut = next((j for j, t in enumerate(row) if t in stop), None)
                body = row if cut is None else row[:cut]
                kept = row if cut is None else row[:cut + 1]
                text, offsets = offsets_from_token_ids(tokenizer, body)
                out.append(Completion(list(prompt), kept, text, offsets, stopped=cut is not None))
    finally:
        model.train(was_training)
    return out


@torch.no_grad()
def shared_prefill(model: Any, rows: Sequence[Sequence[int]], pad_id: int) -> Any | None:
    """A key/value cache of every row's prompt but its last token, computed once per DISTINCT prompt and
    repeated for the rows that share it; `generate` then feeds only the last prompt token. None when no
    prompt repeats (nothing to save) or a prompt is too short to split."""
    distinct = list(dict.fromkeys(tuple(r) for r in rows))
    if len(distinct) == len(rows) or min(len(r) for r in distinct) < 2:
        return None
    ids, mask = (t.to(model_device(model)) for t in left_pad(distinct, pad_id))
    ids, mask = ids[:, :-1], mask[:, :-1]
    cache = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=True,
                  logits_to_keep=1).past_key_values
    index = torch.tensor([distinct.index(tuple(r)) for r in rows], device=ids.device)
    cache.batch_select_indices(index)
    return cache


def _alt_tensor(alt_ids: Sequence[Sequence[int]] | None, c_ids: torch.Tensor) -> torch.Tensor | None:
    """[B, T] alternative ids, the completion's own token where a row gives none (or past its end)."""
    if alt_ids is None:
        return None
    out = c_ids.clone()
    for i, row in enumerate(alt_ids):
        n = min(len(row), out.shape[1])
        out[i, :n] = torch.tensor(list(row)[:n], dtype=torch.long)
    return out


def batch_logprobs(model: Any, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                   pad_id: int, temperature: float = 1.0, alt_ids: Sequence[Sequence[int]] | None = None,
                   masks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Teacher-forced log-probs [B, T] of the completions, their mask [B, T] and the shared prompt length P.

    `temperature` is the one the completions were sampled at (the scored distribution is softmax(z / T)).
    With `alt_ids` (one alternative token per completion position) the log-probs are [B, T, 2]
    (`credit.token_logprobs`). `masks`: the grammar's packed masks of the completions (`SpecDecoding.masks`,
    at least T wide), so the scored distribution is the one sampled under the grammar.

    Prompts are left-padded to P, completions right-padded to T; the returned log-probs keep the graph.
    """
    from lemon.train.credit import token_logprobs

    p_ids, p_mask = left_pad(prompts, pad_id)
    t = max(1, max(len(c) for c in completions))
    c_ids = torch.full((len(completions), t), pad_id, dtype=torch.long)
    c_mask = torch.zeros((len(completions), t), dtype=torch.long)
    for i, c in enumerate(completions):
        if c:
            c_ids[i, :len(c)] = torch.tensor(list(c), dtype=torch.long)
            c_mask[i, :len(c)] = 1
    device = model_device(model)
    alt = _alt_tensor(alt_ids, c_ids)
    c_ids, c_mask = c_ids.to(device), c_mask.to(device)
    ids = torch.cat([p_ids.to(device), c_ids], dim=1)
    mask = torch.cat([p_mask.to(device), c_mask], dim=1)
    # Only the last T+1 positions' logits are needed (position P-1+i predicts completion token i): skipping
    # the prompt's rows of the LM head saves most of its cost and memory on a 49k vocabulary.
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask),
                   logits_to_keep=t + 1).logits
    lp = token_logprobs(logits[:, :t + 1], c_ids, 1, temperature, alt, _allowed(masks, t, logits))
    return lp, c_mask.to(lp.dtype), p_ids.shape[1]


def _allowed(masks: torch.Tensor | None, t: int, logits: torch.Tensor) -> torch.Tensor | None:
    """The packed grammar masks of T positions as booleans [B, T, V] on the logits' device (None: no grammar)."""
    if masks is None:
        return None
    return unpack(masks[:, :t], logits.shape[-1]).to(logits.device)


def shares_prompt(prompts: Sequence[Sequence[int]]) -> bool:
    """Several rows with one prompt (a GRPO group): scoring can run the prompt once."""
    return len(prompts) > 1 and bool(prompts[0]) and all(list(p) == list(prompts[0]) for p in prompts[1:])


def shared_prompt_logprobs(model: Any, prompt: Sequence[int], completions: Sequence[Sequence[int]], pad_id: int,
                           temperature: float = 1.0, alt_ids: Sequence[Sequence[int]] | None = None,
                           masks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """`batch_logprobs` for rows that share ONE prompt: the prompt runs once (batch 1), its key/value cache is
    repeated for the B completions, which then run with it (gradients flow back through the cache).

    A group of G completions of a P-token prompt costs P + G*T tokens instead of G*(P + T): on GRPO's
    ~270-token policy prompts and 64-token completions that is 2.5x less work for the forward, the backward
    and the reference. Same contract and the same numbers (tests/train/test_update.py compares them).
    """
    from lemon.train.credit import token_logprobs

    device = model_device(model)
    b = len(completions)
    t = max(1, max(len(c) for c in completions))
    c_ids = torch.full((b, t), pad_id, dtype=torch.long)
    c_mask = torch.zeros((b, t), dtype=torch.long)
    for i, c in enumerate(completions):
        if c:
            c_ids[i, :len(c)] = torch.tensor(list(c), dtype=torch.long)
            c_mask[i, :len(c)] = 1
    alt = _alt_tensor(alt_ids, c_ids)
    c_ids, c_mask = c_ids.to(device), c_mask.to(device)
    p_ids = torch.tensor([list(prompt)], dtype=torch.long, device=device)
    head = model(input_ids=p_ids, use_cache=True, logits_to_keep=1)
    cache = head.past_key_values
    cache.batch_repeat_interleave(b)
    n = p_ids.shape[1]
    # Right-padded completions need no mask: a real token never attends to the padding after it.
    pos = torch.arange(n, n + t, device=device)[None].expand(b, -1)
    tail = model(input_ids=c_ids, past_key_values=cache, position_ids=pos, use_cache=True).logits
    logits = torch.cat([head.logits[:, -1:].expand(b, -1, -1), tail[:, :t - 1]], dim=1)
    lp = token_logprobs(logits, c_ids, 1, temperature, alt, _allowed(masks, t, logits))
    return lp, c_mask.to(lp.dtype), n


def score_completions(model: Any, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                      pad_id: int, temperature: float = 1.0, share: bool = False,
                      alt_ids: Sequence[Sequence[int]] | None = None,
                      masks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """`shared_prompt_logprobs` when `share` is allowed and the rows have one prompt, else `batch_logprobs`."""
    if share and shares_prompt(prompts):
        return shared_prompt_logprobs(model, prompts[0], completions, pad_id, temperature, alt_ids, masks)
    return batch_logprobs(model, prompts, completions, pad_id, temperature, alt_ids, masks)
