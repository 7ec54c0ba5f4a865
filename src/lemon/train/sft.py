"""`lemon sft`: warm-start the policy on valid specs written by a teacher, and measure validity before/after.

Without a warm start the early GRPO groups are almost all invalid (a penalty and nothing to learn from), so
the policy first learns the canonical format from a stronger teacher: the prompted orchestrator on a pool
level (default: the `large` CPU model under its JSON grammar). Only specs that validate as written or after
mechanical repair are kept (a `fallback` means the teacher failed, and training on the fallback would
teach nothing about the task); `require_correct` also executes each spec and keeps only correct ones. The
target is the CANONICAL text of the spec (`render_spec`), i.e. exactly what GRPO later credits field by field.

Validity is measured the way the trained orchestrator is used: greedy decoding of the policy prompt, no
grammar, strict parse + validate (no repair), on held-out training-pool items never used for SFT.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TypedDict

import torch

from lemon.errors import LemonError
from lemon.llm.serve import workers_for
from lemon.orchestrator.policy_prompt import check_prompt_style, policy_messages, strict_spec, write_prompt_style
from lemon.spec.model import Spec
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.distributed import wants_cuda
from lemon.train.generation import batch_logprobs, chat_prompt_ids, eos_ids, generate
from lemon.train.tasks import TrainTask, is_correct, load_train_tasks, split_record
from lemon.train.verified import Chooser, Menu, live_spec

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class SFTSettings:
    out_dir: Path
    benchmark: str = "gsm8k"
    teacher_pool: str = "cpu"
    teacher_level: str | None = "large"
    policy: str | None = None
    n_train: int = 200
    n_eval: int = 50
    epochs: int = 3
    lr: float = 2e-5
    batch_size: int = 4
    require_correct: bool = False
    data_dir: str | None = None
    seed: int = 0
    max_new_tokens: int = 256
    cache: bool = True
    threads: int | None = 2
    lora: bool = False
    eval_before: bool = True
    # Execution-verified targets (train/verified.py): best of the teacher's team, the default team and the
    # baselines at every level, each run under `worker_samples` worker seeds; kept only if always right.
    verified: bool = False
    worker_samples: int = 2
    # `prompted`: the prompted orchestrator at `teacher_level` writes each target. `library`: one team drawn
    # uniformly from the fixed team library per task, no model call (train/library.py says why). `bank`: the
    # best banked team per task (train/verified.py `bank_targets`), answered from the sample bank; `bank-pooled`
    # and `bank-budget`: one banked team per benchmark (`bank_examples`).
    teacher: str = "prompted"
    # The teacher pool's models in their own server processes (`lemon.llm.serve`); None: whenever torch
    # uses a GPU, where a CUDA llama.cpp in the same process crashes it.
    serve_workers: bool | None = None
    # The policy prompt (`policy_prompt.PROMPT_STYLES`): `terse` asks with the task alone, so the trained
    # orchestrator reads ~40 % of the tokens per task; recorded beside the saved model.
    prompt: str = "full"
    # Pooled teachers only (`bank-pooled`, `bank-budget`): the first N train items of each benchmark (the banked
    # ones) choose its team, and all `n_train` are taught it, unrun (None: every item is run, so all must be
    # banked or cost worker calls).
    bank_items: int | None = None
    # Loss weight of the target tokens of the fields whose value differs between the targets (`decision_weights`:
    # e.g. a gate's threshold chosen per benchmark); 1.0 weighs every token alike.
    decision_weight: float = 1.0


@dataclass(frozen=True)
class SFTExample:
    task_id: str
    prompt: str
    target: str
    source: str
    correct: bool | None


@dataclass(frozen=True)
class ValidReport:
    rate: float
    n: int
    errors: dict[str, str]  # task id -> why its output was invalid


def valid_rate(model: Any, tokenizer: Any, tasks: Sequence[TrainTask], roles: RoleLibrary,
               levels: Sequence[str], *, max_new_tokens: int = 256, batch_size: int = 8,
               style: str = "full") -> ValidReport:
    """Fraction of tasks for which the policy's greedy, unconstrained output is a valid spec as written."""
    prompts = [chat_prompt_ids(tokenizer, policy_messages(t.prompt, roles, levels, style)) for t in tasks]
    comps = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=0.0,
                     batch_size=batch_size)
    errors: dict[str, str] = {}
    for t, c in zip(tasks, comps, strict=True):
        res = strict_spec(c.text, roles, levels)
        if res.spec is None:
            errors[t.id] = res.error or "invalid"
    n = len(tasks)
    return ValidReport(rate=(n - len(errors)) / n if n else 0.0, n=n, errors=errors)


async def teacher_examples(tasks: Sequence[TrainTask], *, pool_name: str, level: str | None,
                           require_correct: bool, cache: bool,
                           progress: Progress | None = None) -> tuple[list[SFTExample], dict[str, int]]:
    """Ask the teacher for a spec per task; keep the valid ones (and, optionally, only correct ones)."""
    from lemon.llm.pools import load_pool
    from lemon.orchestrator.prompted import PromptedOrchestrator
    from lemon.runtime import Executor

    pool = load_pool(pool_name, cache=cache)
    roles = RoleLibrary.load()
    if level is not None and level not in pool.level_names:
        raise LemonError(f"teacher level {level!r} is not a level of pool {pool_name!r}; "
                         f"valid: {', '.join(pool.level_names)}")
    teacher = PromptedOrchestrator(pool, roles, level=level)
    executor = Executor(pool, roles)
    kept: list[SFTExample] = []
    counts = {"model": 0, "repaired": 0, "fallback": 0, "incorrect": 0, "pruned": 0}
    try:
        for k, t in enumerate(tasks):
            proposal = await teacher.propose(t.prompt)
            counts[proposal.source] += 1
            correct: bool | None = None
            if proposal.source != "fallback" and require_correct:
                run = await executor.run(proposal.spec, t.prompt, vote_key=t.vote_key, task_id=t.id,
                                         max_tokens=t.reply_tokens)
                correct = run.status == "ok" and await is_correct(t, run.answer)
                if not correct:
                    counts["incorrect"] += 1
            if proposal.source != "fallback" and correct is not False:
                target = live_spec(proposal.spec)
                counts["pruned"] += target is not proposal.spec
                kept.append(SFTExample(t.id, t.prompt, render_spec(target).text, proposal.source, correct))
            if progress is not None:
                progress("teacher", k + 1, len(tasks))
    finally:
        await pool.aclose()
    return kept, counts


def verified_sft_examples(targets: Sequence[tuple[TrainTask, str, Spec]],
                          won: dict[str, int]) -> tuple[list[SFTExample], dict[str, int]]:
    """Executed-and-right targets as SFT examples, with how many distinct teams they teach."""
    examples = [SFTExample(t.id, t.prompt, render_spec(spec).text, label, True) for t, label, spec in targets]
    return examples, {**won, "distinct_targets": len({e.target for e in examples})}


async def verified_examples(tasks: Sequence[TrainTask], s: SFTSettings, *,
                            progress: Progress | None = None) -> tuple[list[SFTExample], dict[str, int]]:
    """SFT examples from `verified.verified_targets` on the teacher pool (workers sampled as in training)."""
    from lemon.llm.pools import load_pool
    from lemon.orchestrator.prompted import PromptedOrchestrator
    from lemon.train.config import load_train_config
    from lemon.train.verified import verified_targets
    from lemon.train.workers import worker_executor, worker_tasks

    cfg = load_train_config()
    pool = load_pool(s.teacher_pool, cache=s.cache)
    roles = RoleLibrary.load()
    teacher = PromptedOrchestrator(pool, roles, level=s.teacher_level) if s.teacher_level else None
    try:
        targets, won = await verified_targets(worker_tasks(tasks, cfg), worker_executor(pool, roles, cfg),
                                              reward=cfg.reward, teacher=teacher, worker_samples=s.worker_samples,
                                              seed=s.seed, progress=progress)
    finally:
        await pool.aclose()
    return verified_sft_examples(targets, won)


async def bank_examples(tasks: Sequence[TrainTask], s: SFTSettings, progress: Progress | None = None, *,
                        pooled: str | None = None) -> tuple[list[SFTExample], dict[str, int]]:
    """SFT examples from `verified.bank_targets` (the best banked team per task) or a pooled teacher (one team a
    benchmark, chosen on the first `s.bank_items` tasks of each): `reward`, `verified.pooled_bank_targets`'s
    best mean reward; `budget`, `budget_teacher`'s most accurate team under the bar's token share;
    `budget-programs`, the same over a menu with the program-of-thought teams (`PROGRAM_TEAMS`). No worker
    call where the sample bank (`experiments/adaptive_cpu.sh train-bank`) holds the task."""
    from lemon.llm.pools import load_pool
    from lemon.train.config import load_train_config
    from lemon.train.verified import bank_targets, pooled_bank_targets
    from lemon.train.workers import worker_executor, worker_tasks

    cfg = load_train_config()
    pool = load_pool(s.teacher_pool, cache=s.cache)
    targets_of = bank_targets if pooled is None else partial(pooled_bank_targets, chosen_on=s.bank_items,
                                                             **_pooled_choice(pooled, s.prompt))
    try:
        targets, won = await targets_of(worker_tasks(tasks, cfg), worker_executor(pool, RoleLibrary.load(), cfg),
                                        reward=cfg.reward, progress=progress)
    finally:
        await pool.aclose()
    return verified_sft_examples(targets, won)


class _PooledChoice(TypedDict, total=False):
    """`pooled_bank_targets`' keywords that pick the teacher's menu and chooser (absent: its defaults)."""

    menu: Menu
    choose: Chooser


def _pooled_choice(pooled: str, prompt_style: str) -> _PooledChoice:
    """The menu and chooser of a pooled teacher (`pooled_bank_targets`' keywords): its defaults for `reward`."""
    if pooled == "reward":
        return {}
    from lemon.train.budget_teacher import FRAMING_TOKENS, budget_candidates, most_accurate_within, program_candidates

    return {"menu": program_candidates if pooled == "budget-programs" else budget_candidates,
            "choose": partial(most_accurate_within, framing_tokens=FRAMING_TOKENS[prompt_style])}


async def library_examples(tasks: Sequence[TrainTask], s: SFTSettings,
                           progress: Progress | None = None) -> tuple[list[SFTExample], dict[str, int]]:
    """SFT examples from `library.library_targets` on the teacher pool's levels (no model call)."""
    from lemon.llm.pools import pool_level_names
    from lemon.train.library import library_targets

    targets, counts = library_targets(tasks, RoleLibrary.load(), pool_level_names(s.teacher_pool), seed=s.seed)
    return [SFTExample(t.id, t.prompt, render_spec(spec).text, label, None) for t, label, spec in targets], counts


async def _prompted(tasks: Sequence[TrainTask], s: SFTSettings,
                    progress: Progress | None) -> tuple[list[SFTExample], dict[str, int]]:
    if s.verified:
        return await verified_examples(tasks, s, progress=progress)
    return await teacher_examples(tasks, pool_name=s.teacher_pool, level=s.teacher_level,
                                  require_correct=s.require_correct, cache=s.cache, progress=progress)


#: The SFT teachers: a new one is a function of (tasks, settings, progress) and an entry here.
#: An SFT teacher: the examples of some tasks and its counts (`build_examples`).
Teacher = Callable[[Sequence[TrainTask], SFTSettings, Progress | None],
                   Awaitable[tuple[list[SFTExample], dict[str, int]]]]

TEACHERS: dict[str, Teacher] = {"prompted": _prompted, "library": library_examples, "bank": bank_examples,
            "bank-pooled": partial(bank_examples, pooled="reward"),
            "bank-budget": partial(bank_examples, pooled="budget"),
            "bank-budget-programs": partial(bank_examples, pooled="budget-programs")}


#: The largest `decision_weight`: beyond it the few decision tokens are nearly the whole loss, and the layout
#: the policy must also write is no longer learnt.
MAX_DECISION_WEIGHT = 100.0
#: The teachers that choose one team per benchmark (and so take `bank_items`).
POOLED_TEACHERS = ("bank-pooled", "bank-budget", "bank-budget-programs")


async def build_examples(tasks: Sequence[TrainTask], s: SFTSettings, *,
                         progress: Progress | None = None) -> tuple[list[SFTExample], dict[str, int]]:
    """The SFT data of the configured teacher (`TEACHERS`): prompted (or verified best-of-N), or library."""
    try:
        teacher = TEACHERS[s.teacher]
    except KeyError:
        raise LemonError(f"unknown SFT teacher {s.teacher!r}; valid: {', '.join(TEACHERS)}") from None
    return await teacher(tasks, s, progress)


#: The teachers that make no model call: no worker is started (or served) for them.
MODEL_FREE_TEACHERS = ("library",)


async def teacher_data(tasks: Sequence[TrainTask], s: SFTSettings, progress: Progress | None
                       ) -> tuple[list[SFTExample], dict[str, int]]:
    """`build_examples` with the teacher pool's workers started (served when `serve_workers` or CUDA says so)
    around it, unless the teacher makes no model call: a llama-server started for nothing costs its load."""
    if s.teacher in MODEL_FREE_TEACHERS:
        return await build_examples(tasks, s, progress=progress)
    serve = wants_cuda() if s.serve_workers is None else s.serve_workers
    with workers_for(s.teacher_pool, serve, s.out_dir / "workers") as pool:
        return await build_examples(tasks, replace(s, teacher_pool=pool), progress=progress)


def sft_rows(tokenizer: Any, eos: int, examples: Sequence[SFTExample], roles: RoleLibrary, levels: Sequence[str],
             style: str, decision_weight: float) -> list[tuple[list[int], list[int], list[float]]]:
    """(prompt ids, target ids + EOS, a loss weight per target token) of each example; the weights are
    `decision_weight` on the fields whose value differs between the targets (`decision_weights`), else 1."""
    from lemon.train.decision_weights import decision_kinds, decision_token_weights

    kinds = decision_kinds([e.target for e in examples]) if decision_weight != 1.0 else frozenset()
    rows = []
    for e in examples:
        target, weights = decision_token_weights(tokenizer, e.target, kinds, decision_weight)
        rows.append((chat_prompt_ids(tokenizer, policy_messages(e.prompt, roles, levels, style)), [*target, eos],
                     [*weights, 1.0]))
    return rows


def finetune(model: Any, tokenizer: Any, examples: Sequence[SFTExample], roles: RoleLibrary,
             levels: Sequence[str], *, epochs: int, lr: float, batch_size: int, seed: int,
             progress: Progress | None = None, style: str = "full", decision_weight: float = 1.0) -> list[float]:
    """Cross-entropy on the completion tokens only (target text + EOS), each token weighted as `sft_rows` says;
    returns the weighted mean loss per epoch (the plain mean at `decision_weight` 1)."""
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else min(eos_ids(model, tokenizer))
    data = sft_rows(tokenizer, eos, examples, roles, levels, style, decision_weight)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rng = random.Random(seed)
    losses: list[float] = []
    total = epochs * ((len(data) + batch_size - 1) // batch_size)
    done = 0
    model.train()
    for _ in range(epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        epoch_loss, epoch_tokens = 0.0, 0.0
        for b in range(0, len(order), batch_size):
            rows = [data[i] for i in order[b:b + batch_size]]
            lp, mask, _ = batch_logprobs(model, [r[0] for r in rows], [r[1] for r in rows],
                                         tokenizer.pad_token_id)
            weights = mask * _padded(rows, lp.shape[1]).to(lp.device)
            n = weights.sum()
            loss = -(lp * weights).sum() / n
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            epoch_loss += float(loss.detach()) * float(n)
            epoch_tokens += float(n)
            done += 1
            if progress is not None:
                progress("finetune", done, total)
        losses.append(epoch_loss / max(1.0, epoch_tokens))
    model.eval()
    return losses


def _padded(rows: Sequence[tuple[list[int], list[int], list[float]]], width: int) -> torch.Tensor:
    """The rows' token weights [B, width], right-padded with 0 as `batch_logprobs` pads the completions."""
    out = torch.zeros((len(rows), width))
    for i, (_, _, w) in enumerate(rows):
        out[i, :len(w)] = torch.tensor(w)
    return out


def _save_model(model: Any, tokenizer: Any, target: Path, style: str) -> None:
    tmp = target.with_name(f".{target.name}-tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    out = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    out.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    write_prompt_style(tmp, style)
    if target.exists():
        shutil.rmtree(target)
    os.rename(tmp, target)


def sft_tasks(s: SFTSettings) -> tuple[str, list[TrainTask], list[TrainTask]]:
    """(split, targets' tasks, held-out tasks for the valid-spec rate), counted per benchmark as `lemon train
    --limit` counts: in a mixture the held-out items follow EACH benchmark's first `n_train`, so none of them is
    an item GRPO then trains on."""
    split, train_tasks = load_train_tasks(s.benchmark, limit=s.n_train, data_dir=s.data_dir)
    _, eval_tasks = load_train_tasks(s.benchmark, limit=s.n_eval, offset=s.n_train, data_dir=s.data_dir)
    if len(eval_tasks) < s.n_eval * len(s.benchmark.split(",")):
        raise LemonError(f"{s.benchmark}/{split} has too few items for {s.n_train} + {s.n_eval} per benchmark")
    return split, train_tasks, eval_tasks


async def run_sft(s: SFTSettings, *, progress: Progress | None = None,
                  examples: Sequence[SFTExample] | None = None) -> dict[str, Any]:
    """The whole `lemon sft`: teacher data, validity before, fine-tune, validity after, save; returns the report.

    The policy is saved to `out_dir/model`, the teacher data to `out_dir/sft_data.jsonl` and the report
    (with the split and item ids used) to `out_dir/sft.json`.
    """
    from lemon.llm.pools import pool_level_names
    from lemon.train.config import load_train_config
    from lemon.train.policy import load_policy

    check_prompt_style(s.prompt)
    if s.bank_items is not None and (s.bank_items < 1 or s.teacher not in POOLED_TEACHERS):
        raise LemonError(f"--bank-items {s.bank_items}: give a count of at least 1, with --teacher "
                         f"{' or '.join(POOLED_TEACHERS)}")
    if not 1.0 <= s.decision_weight <= MAX_DECISION_WEIGHT:
        raise LemonError(f"--decision-weight {s.decision_weight}: give a weight from 1 (every token alike) to "
                         f"{MAX_DECISION_WEIGHT:g}")
    if s.threads:
        torch.set_num_threads(s.threads)
    t0 = time.perf_counter()
    split, train_tasks, eval_tasks = sft_tasks(s)
    roles = RoleLibrary.load()
    levels = pool_level_names(s.teacher_pool)
    s.out_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    if examples is None:
        examples, counts = await teacher_data(train_tasks, s, progress)
    examples = list(examples)
    with (s.out_dir / "sft_data.jsonl").open("w", encoding="utf-8") as fh:
        for e in examples:
            fh.write(json.dumps(asdict(e)) + "\n")
    if not examples:
        raise LemonError("the teacher wrote no usable spec; try another --teacher-level or pool")
    model, tok = load_policy(s.policy, lora=load_train_config().lora if s.lora else None)
    before = valid_rate(model, tok, eval_tasks, roles, levels, max_new_tokens=s.max_new_tokens,
                        style=s.prompt) if s.eval_before else None
    if progress is not None:
        progress("eval-before", 1, 1)
    losses = finetune(model, tok, examples, roles, levels, epochs=s.epochs, lr=s.lr, batch_size=s.batch_size,
                      seed=s.seed, progress=progress, style=s.prompt, decision_weight=s.decision_weight)
    after = valid_rate(model, tok, eval_tasks, roles, levels, max_new_tokens=s.max_new_tokens, style=s.prompt)
    _save_model(model, tok, s.out_dir / "model", s.prompt)
    report = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(s).items()},
        "teacher_counts": counts, "n_examples": len(examples), "epoch_loss": losses,
        "valid_rate_before": before.rate if before else None, "valid_rate_after": after.rate,
        "n_eval": after.n, "invalid_after": after.errors,
        "train_data": split_record(s.benchmark, split, train_tasks),
        "eval_data": split_record(s.benchmark, split, eval_tasks),
        "model_dir": str(s.out_dir / "model"), "wall_s": time.perf_counter() - t0,
    }
    (s.out_dir / "sft.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report
