"""`lemon train`: orchestration-level GRPO with localized counterfactual credit, as a compact trainer.

One step: pick `tasks_per_step` training tasks (a seeded permutation per epoch), sample a group of G specs
per task with HF `generate` (the sampled token ids are kept), score each group with `rollout.rollout_group`
(execution, reward, counterfactuals through the node cache), turn rewards into group-relative advantages
on every completion token plus Δ-weighted terms on the tokens of each edited field, and take ONE AdamW step
on `policy_gradient_loss + counterfactual_loss` (+ KL to a frozen reference when kl_beta > 0).

Why not TRL's GRPOTrainer: our reward needs the sampled ids and character offsets of every completion to
place the counterfactual term, asynchronous multi-agent execution per group, and adaptive-sampler state in
checkpoints; in TRL those live in private methods (`_generate_and_score_completions`, `_compute_loss`) that
change between releases. The loop below is ~300 lines and every piece of the loss is tested directly.

Checkpoints are written to a temporary directory and renamed into place, so a crash never leaves a
half-written checkpoint that `--resume` would load. Per-step randomness (sampling, counterfactual choices,
task order) is derived from (seed, step), so a resumed run draws what the uninterrupted run would have.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from lemon.errors import ConfigError, LemonError
from lemon.orchestrator.policy_prompt import policy_messages
from lemon.spec.render import Span
from lemon.spec.roles import RoleLibrary
from lemon.train.config import TrainConfig, load_train_config
from lemon.train.credit import (
    CounterfactualTerm,
    counterfactual_advantages,
    counterfactual_loss,
    group_advantages,
    policy_gradient_loss,
)
from lemon.train.generation import Completion, batch_logprobs, chat_prompt_ids, generate
from lemon.train.rollout import Ablation, GroupResult, RolloutSettings, rollout_group
from lemon.train.sampler import AdaptiveFamilySampler
from lemon.train.tasks import TrainTask, load_train_tasks, split_record
from lemon.train.token_spans import char_span_to_token_indices

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
COMPLETE = "COMPLETE"
METRICS = "metrics.jsonl"
RUN_INFO = "run.json"


@dataclass(frozen=True)
class TrainSettings:
    """Everything a `lemon train` run is configured with (besides the config file's coefficients)."""

    run_dir: Path
    benchmark: str = "gsm8k"
    pool: str = "tiny"
    policy: str | None = None            # HF directory or hub id; None = the converted SmolLM2 default
    steps: int = 100
    limit_tasks: int | None = None        # first N items of the train split
    data_dir: str | None = None
    config_path: str | None = None
    save_every: int = 50
    keep_checkpoints: int = 2
    seed: int = 0
    resume: bool = False
    cf: bool = True
    families: tuple[str, ...] | None = None
    ablation: Ablation = field(default_factory=Ablation)
    lora: bool = False
    cache: bool = True
    threads: int | None = 2
    # Overrides of config values (None = keep the config file's).
    group_size: int | None = None
    max_new_tokens: int | None = None
    kl_beta: float | None = None
    lr: float | None = None
    tasks_per_step: int | None = None


def stable_seed(*parts: object) -> int:
    digest = hashlib.sha256("\x00".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def effective_config(s: TrainSettings) -> TrainConfig:
    """The config file with the command-line overrides applied (validated again)."""
    cfg = load_train_config(s.config_path)
    data = cfg.model_dump()
    if s.group_size is not None:
        data["group"]["group_size"] = s.group_size
    if s.max_new_tokens is not None:
        data["rollout"]["max_new_tokens"] = s.max_new_tokens
    if s.tasks_per_step is not None:
        data["rollout"]["tasks_per_step"] = s.tasks_per_step
    if s.kl_beta is not None:
        data["credit"]["kl_beta"] = s.kl_beta
    if s.lr is not None:
        data["optim"]["lr"] = s.lr
    if s.families is not None:
        data["sampler"]["families"] = tuple(s.families)
    try:
        return TrainConfig.model_validate(data)
    except Exception as exc:  # pydantic ValidationError: one line
        raise ConfigError(f"invalid training override: {str(exc).splitlines()[-1].strip()}") from None


def task_indices(step: int, n_tasks: int, per_step: int, seed: int) -> list[int]:
    """Tasks of `step` (1-based): consecutive slices of a seeded permutation, reshuffled every epoch."""
    out: list[int] = []
    start = (step - 1) * per_step
    for k in range(start, start + per_step):
        epoch, pos = divmod(k, n_tasks)
        order = list(range(n_tasks))
        random.Random(stable_seed(seed, "epoch", epoch)).shuffle(order)
        out.append(order[pos])
    return out


# ---- checkpoints -------------------------------------------------------------------------------------


def checkpoint_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first."""
    root = run_dir / CHECKPOINTS
    found = []
    for p in root.glob("step-*") if root.is_dir() else []:
        if (p / COMPLETE).is_file():
            try:
                found.append((int(p.name.split("-", 1)[1]), p))
            except ValueError:
                continue
    return sorted(found)


def save_checkpoint(run_dir: Path, step: int, model: Any, tokenizer: Any, optimizer: Any,
                    sampler: AdaptiveFamilySampler, keep: int) -> Path:
    """Write step-N atomically (temp dir + rename), then drop all but the newest `keep` checkpoints."""
    root = run_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, "sampler": sampler.state_dict()}),
                                            encoding="utf-8")
    (tmp / COMPLETE).write_text("ok\n", encoding="utf-8")
    if target.exists():
        shutil.rmtree(target)
    os.rename(tmp, target)
    for _, old in checkpoint_dirs(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return target


def _truncate_metrics(path: Path, last_step: int) -> None:
    """Drop metric rows of steps after the checkpoint being resumed (they will be recomputed)."""
    if not path.is_file():
        return
    keep = [ln for ln in path.read_text(encoding="utf-8").splitlines()
            if ln.strip() and json.loads(ln).get("step", 0) <= last_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(ln + "\n" for ln in keep), encoding="utf-8")
    os.replace(tmp, path)


# ---- the trainer -------------------------------------------------------------------------------------


@dataclass
class StepBatch:
    """The sequences of one step with their per-token advantages."""

    prompts: list[list[int]] = field(default_factory=list)
    completions: list[list[int]] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    cf_terms: list[list[CounterfactualTerm]] = field(default_factory=list)


def build_batch(groups: Sequence[GroupResult], completions: Sequence[Sequence[Completion]],
                cf_weight: float) -> StepBatch:
    """Group advantages for every token, plus λΔ on the tokens of each counterfactual's field."""
    batch = StepBatch()
    for group, comps in zip(groups, completions, strict=True):
        adv = group_advantages(group.rewards)
        for sample, comp, a in zip(group.samples, comps, adv, strict=True):
            terms: list[CounterfactualTerm] = []
            if sample.cf is not None and cf_weight > 0:
                idx = char_span_to_token_indices(comp.offsets, Span(sample.cf.char_start, sample.cf.char_end))
                if idx:
                    terms.append(CounterfactualTerm(idx, sample.cf.delta, cf_weight))
            batch.prompts.append(comp.prompt_ids)
            batch.completions.append(comp.ids)
            batch.advantages.append(a)
            batch.cf_terms.append(terms)
    return batch


def policy_update(model: Any, ref_model: Any | None, batch: StepBatch, optimizer: Any, cfg: TrainConfig,
                  pad_id: int) -> dict[str, float]:
    """One optimiser step on the batch; returns loss parts and the gradient norm."""
    n_tokens = sum(len(c) for c in batch.completions)
    kl_beta = cfg.credit.kl_beta if ref_model is not None else 0.0
    active = any(a != 0 for a in batch.advantages) or any(batch.cf_terms) or kl_beta > 0
    stats = {"loss_pg": 0.0, "loss_cf": 0.0, "kl": 0.0, "grad_norm": 0.0, "updated": 0.0}
    if not active or n_tokens == 0:
        return stats
    model.train()
    optimizer.zero_grad(set_to_none=True)
    mb = cfg.optim.micro_batch
    for b in range(0, len(batch.completions), mb):
        sl = slice(b, b + mb)
        comps = batch.completions[sl]
        lp, mask, _ = batch_logprobs(model, batch.prompts[sl], comps, pad_id)
        t = lp.shape[1]
        adv = torch.stack([torch.full((t,), a, dtype=lp.dtype, device=lp.device) for a in batch.advantages[sl]])
        cf = torch.stack([counterfactual_advantages(t, terms).to(lp.device, lp.dtype)
                          for terms in batch.cf_terms[sl]])
        ref_lp = None
        if kl_beta > 0:
            with torch.no_grad():
                ref_lp, _, _ = batch_logprobs(ref_model, batch.prompts[sl], comps, pad_id)
        share = mask.sum().item() / n_tokens  # token-mean over the whole batch, not per micro-batch
        pg = policy_gradient_loss(lp, adv, mask, ref_logprobs=ref_lp, kl_beta=kl_beta) * share
        cfl = counterfactual_loss(lp, cf, mask) * share
        (pg + cfl).backward()
        stats["loss_pg"] += float(pg.detach())
        stats["loss_cf"] += float(cfl.detach())
        if ref_lp is not None:
            with torch.no_grad():
                d = ref_lp - lp.detach()
                k3 = (torch.exp(d) - d - 1.0) * mask
                stats["kl"] += float(k3.sum()) / n_tokens
    params = [p for p in model.parameters() if p.requires_grad]
    stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.optim.max_grad_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stats["updated"] = 1.0
    return stats


def step_metrics(step: int, groups: Sequence[GroupResult], completions: Sequence[Sequence[Completion]],
                 sampler: AdaptiveFamilySampler | None, families: Sequence[str]) -> dict[str, Any]:
    """The per-step JSONL row (rewards and components, validity, tokens, cache, counterfactual stats)."""
    samples = [s for g in groups for s in g.samples]
    rewards = [s.total_reward for s in samples]
    mean = sum(rewards) / len(rewards)
    valid = [s for s in samples if s.valid]

    def avg(xs: Sequence[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    cfs = [s.cf for s in samples if s.cf is not None]
    row: dict[str, Any] = {
        "step": step,
        "reward_mean": mean,
        "reward_std": math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)),
        "success_mean": avg([s.reward.success for s in samples if s.reward]),
        "efficiency_mean": avg([s.reward.efficiency for s in samples if s.reward]),
        "structure_mean": avg([s.reward.structure for s in samples if s.reward]),
        "invalid_penalty_mean": avg([s.reward.invalid for s in samples if s.reward]),
        "valid_rate": len(valid) / len(samples),
        "canonical_rate": avg([1.0 if s.canonical_at is not None else 0.0 for s in valid]),
        "accuracy": avg([1.0 if s.correct else 0.0 for s in samples]),
        "worker_tokens": sum(s.spent_tokens for s in samples) + sum(c.spent_tokens for c in cfs),
        "rollout_tokens": sum(s.spent_tokens for s in samples),
        "cf_tokens": sum(c.spent_tokens for c in cfs),
        "spec_tokens_mean": avg([float(s.total_tokens) for s in valid]),
        "node_cache_hits": sum(s.cache_hits for s in samples) + sum(c.cache_hits for c in cfs),
        "cf_cache_hits": sum(c.cache_hits for c in cfs),
        "cf_count": len(cfs),
        "cf_skipped": {k: sum(1 for s in samples if s.cf_skip == k) for k in
                       sorted({s.cf_skip for s in samples if s.cf_skip})},
        "completion_len_mean": avg([float(len(c.ids)) for cs in completions for c in cs]),
        "stopped_rate": avg([1.0 if c.stopped else 0.0 for cs in completions for c in cs]),
    }
    for f in families:
        ds = [c.delta for c in cfs if c.family == f]
        row[f"cf_delta_mean/{f}"] = avg(ds)
        row[f"cf_abs_delta_mean/{f}"] = avg([abs(d) for d in ds])
        row[f"cf_n/{f}"] = len(ds)
    if sampler is not None:
        probs = groups[0].sampler_probs or sampler.probabilities()
        for f, p in probs.items():
            row[f"family_prob/{f}"] = p
    return row


def _load_model(s: TrainSettings, cfg: TrainConfig, checkpoint: Path | None) -> tuple[Any, Any]:
    from lemon.train.policy import load_policy

    if checkpoint is None:
        return load_policy(s.policy, lora=cfg.lora if s.lora else None)
    if not s.lora:
        return load_policy(str(checkpoint))
    from peft import PeftModel

    base, tok = load_policy(s.policy)
    return PeftModel.from_pretrained(base, str(checkpoint), is_trainable=True), tok


def _run_info(s: TrainSettings, cfg: TrainConfig, split: str, tasks: Sequence[TrainTask]) -> dict[str, Any]:
    from importlib import metadata

    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(s).items() if k != "ablation"}
    versions = {}
    for pkg in ("torch", "transformers", "peft", "lemon-mas"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"settings": settings, "ablation": s.ablation.as_dict(), "config": cfg.model_dump(mode="json"),
            "data": split_record(s.benchmark, split, tasks), "versions": versions}


@dataclass(frozen=True)
class TrainSummary:
    run_dir: Path
    first_step: int
    last_step: int
    final_dir: Path
    last_metrics: dict[str, Any]


ProgressHook = Callable[[int, dict[str, Any]], None]


async def train(s: TrainSettings, *, tasks: Sequence[TrainTask] | None = None, split: str | None = None,
                on_step: ProgressHook | None = None) -> TrainSummary:
    """Run (or resume) GRPO training; see the module docstring. `tasks` overrides the benchmark's split."""
    from lemon.llm.pools import load_pool
    from lemon.runtime import Budget, Executor

    if s.threads:
        torch.set_num_threads(s.threads)
    cfg = effective_config(s)
    if s.ablation.fixed_capacity is not None:
        from lemon.llm.pools import pool_level_names

        if s.ablation.fixed_capacity not in pool_level_names(s.pool):
            raise ConfigError(f"--fixed-capacity {s.ablation.fixed_capacity!r} is not a level of pool "
                              f"{s.pool!r}; valid: {', '.join(pool_level_names(s.pool))}")
    run_dir = s.run_dir
    ckpts = checkpoint_dirs(run_dir)
    if (run_dir / RUN_INFO).exists() and not s.resume:
        raise LemonError(f"run directory {run_dir} already holds a run; pass --resume to continue it or "
                         "choose another --run-dir")
    if s.resume and not ckpts:
        raise LemonError(f"--resume: no complete checkpoint under {run_dir / CHECKPOINTS}")
    if tasks is None:
        split, tasks = load_train_tasks(s.benchmark, limit=s.limit_tasks, data_dir=s.data_dir)
    split = split or "custom"
    tasks = list(tasks)
    info_path = run_dir / RUN_INFO
    if s.resume:
        info = json.loads(info_path.read_text(encoding="utf-8"))
        if info["data"]["item_ids"] != [t.id for t in tasks]:
            raise LemonError(f"--resume: the training items differ from those recorded in {info_path}; "
                             "use the same --benchmark/--limit-tasks")
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        info = _run_info(s, cfg, split, tasks) if split != "custom" else {
            "settings": {"run_dir": str(run_dir)}, "config": cfg.model_dump(mode="json"),
            "data": {"benchmark": s.benchmark, "split": split, "item_ids": [t.id for t in tasks]}}
        info_path.write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")

    checkpoint = ckpts[-1][1] if s.resume else None
    model, tok = _load_model(s, cfg, checkpoint)
    ref_model = None
    if cfg.credit.kl_beta > 0:
        from lemon.train.policy import load_policy

        ref_model, _ = load_policy(s.policy)
        ref_model.eval().requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    sampler = AdaptiveFamilySampler.from_config(cfg.sampler, seed=stable_seed(s.seed, "sampler"))
    start = 1
    if checkpoint is not None:
        optimizer.load_state_dict(torch.load(checkpoint / "optimizer.pt", weights_only=True))
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        sampler.load_state_dict(state["sampler"])
        rng = torch.load(checkpoint / "rng.pt", weights_only=False)
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        start = int(state["step"]) + 1
        _truncate_metrics(run_dir / METRICS, start - 1)
        log.info("resuming %s from step %d", run_dir, start - 1)

    pool = load_pool(s.pool, cache=s.cache)
    roles = RoleLibrary.load()
    executor = Executor(pool, roles, budget=Budget(max_tokens=cfg.rollout.worker_budget_tokens))
    levels = pool.level_names
    settings = RolloutSettings(reward=cfg.reward, cf_enabled=s.cf, cf_budget=cfg.credit.cf_budget,
                               ablation=s.ablation)
    pad_id = tok.pad_token_id
    g = cfg.group.group_size
    last: dict[str, Any] = {}
    try:
        for step in range(start, s.steps + 1):
            t0 = time.perf_counter()
            chosen = [tasks[i] for i in task_indices(step, len(tasks), cfg.rollout.tasks_per_step, s.seed)]
            prompts = [chat_prompt_ids(tok, policy_messages(t.prompt, roles, levels)) for t in chosen]
            rows = [p for p in prompts for _ in range(g)]
            comps = generate(model, tok, rows, max_new_tokens=cfg.rollout.max_new_tokens,
                             temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                             seed=stable_seed(s.seed, "generate", step), batch_size=max(g, 8))
            grouped = [comps[k * g:(k + 1) * g] for k in range(len(chosen))]
            t1 = time.perf_counter()
            rng = random.Random(stable_seed(s.seed, "rollout", step))
            groups = list(await asyncio.gather(*(
                rollout_group(executor, t, [c.text for c in cs], roles=roles, settings=settings,
                              sampler=sampler if s.cf else None, rng=random.Random(rng.random()),
                              seed=stable_seed(s.seed, "worker", t.id))
                for t, cs in zip(chosen, grouped, strict=True))))
            t2 = time.perf_counter()
            batch = build_batch(groups, grouped, cfg.credit.cf_weight if s.cf else 0.0)
            upd = policy_update(model, ref_model, batch, optimizer, cfg, pad_id)
            t3 = time.perf_counter()
            row = step_metrics(step, groups, grouped, sampler if s.cf else None, cfg.sampler.families)
            row.update(upd)
            row.update({"task_ids": [t.id for t in chosen], "gen_s": t1 - t0, "exec_s": t2 - t1,
                        "update_s": t3 - t2, "step_s": t3 - t0})
            with (run_dir / METRICS).open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            last = row
            if step % s.save_every == 0 or step == s.steps:
                save_checkpoint(run_dir, step, model, tok, optimizer, sampler, s.keep_checkpoints)
            if on_step is not None:
                on_step(step, row)
    finally:
        await pool.aclose()
    final = run_dir / "final"
    export_final(model, tok, final)
    return TrainSummary(run_dir, start, s.steps, final, last)


def export_final(model: Any, tokenizer: Any, target: Path) -> None:
    """Save the trained policy as a plain HF directory (LoRA merged), atomically."""
    tmp = target.with_name(f".{target.name}-tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    out = model
    if hasattr(model, "merge_and_unload"):
        import copy

        out = copy.deepcopy(model).merge_and_unload()
    out.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    if target.exists():
        shutil.rmtree(target)
    os.rename(tmp, target)
