"""`lemon train`: orchestration-level GRPO with localized counterfactual credit, as a compact trainer.

`Trainer.step` is the whole algorithm in four named phases:

1. **generate**: pick `tasks_per_step` training tasks (a seeded permutation per epoch) and sample a group of
   G specs per task from the policy (the sampled token ids are kept);
2. **rollout**: `rollout.rollout_groups` scores every group (execution through one node cache per group,
   workers sampled as in evaluation), plans counterfactual edits in task order and runs them;
3. **credit**: `build_batch` turns rewards into group-relative advantages on every completion token and
   Δ on the tokens of each edited field, both divided by ONE scale (`credit.advantage_scales`);
4. **update**: `optim.epochs` AdamW steps (1 by default; later epochs use PPO's clipped ratio to the
   sampling policy) on `policy_gradient_loss + counterfactual_loss` (+ k3 KL to the reference), skipped
   when the batch carries no signal. Each group's prompt is scored once (`optim.share_prompt`).

The jobs live one a module: `batch` (tasks per step, rewards -> advantages), `microbatch` (prompt sharing),
`accumulate` (the loss), `update` (the optimiser steps), `metrics`, `checkpoint`, `workers` (the worker
executor) and `settings` (the run's settings and config overrides); this module is the `Trainer` and `train`.

Under `accelerate launch` each process runs the four phases on its share of the step's tasks; the loss is
a token mean over the global batch and the groups are gathered for the metrics (`lemon.train.distributed`).

Every step appends a metrics row (rewards, validity, accuracy, the seconds of each phase, the relative weight
change, KL, distinct teams and the sampled-token entropy) and the sampled specs to the run directory.

Why not TRL's GRPOTrainer: our reward needs the sampled ids and character offsets of every completion to
place the counterfactual term, asynchronous multi-agent execution per group, and adaptive-sampler state in
checkpoints; in TRL those live in private methods (`_generate_and_score_completions`, `_compute_loss`) that
change between releases. Per-step randomness (sampling, counterfactual choices, task order) is derived from
(seed, step), so a resumed run draws what the uninterrupted run would have; no global random state is read.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lemon.errors import ConfigError, LemonError
from lemon.llm.constrained import spec_decoding
from lemon.llm.serve import workers_for
from lemon.orchestrator.policy_prompt import policy_messages, read_prompt_style
from lemon.runtime import Executor
from lemon.seeds import stable_seed
from lemon.spec.roles import RoleLibrary
from lemon.train.batch import StepBatch, build_batch, group_worker_seed, task_indices
from lemon.train.checkpoint import export_policy, restore_checkpoint, save_checkpoint
from lemon.train.config import TrainConfig
from lemon.train.distributed import Distributed, check_shares, open_distributed, wants_cuda
from lemon.train.generation import Completion
from lemon.train.metrics import MetricsRow, sample_rows, step_metrics
from lemon.train.policy_handle import HFPolicy, PolicyHandle, Reference
from lemon.train.rollout import GroupResult, RolloutSettings, rollout_groups
from lemon.train.run_dir import RunDir
from lemon.train.sampler import AdaptiveFamilySampler
from lemon.train.settings import TrainSettings, effective_config
from lemon.train.tasks import TrainTask, load_train_tasks, split_record
from lemon.train.update import policy_update, trainable
from lemon.train.workers import worker_executor, worker_tasks

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)

__all__ = ["TrainSummary", "Trainer", "export_trained", "train"]


# ---- the trainer -------------------------------------------------------------------------------------

INVALID_HINT = ("every sampled spec was invalid (reward = invalid penalty, no gradient): the policy does not "
                "write specs yet; start from an SFT policy (lemon sft --out runs/sft, then --policy "
                "runs/sft/model)")
ProgressHook = Callable[[int, MetricsRow], None]


@dataclass
class Trainer:
    """The state of one GRPO run; `step(n)` runs the four phases of step n (see the module docstring).

    In a data-parallel run (`dist`, see `lemon.train.distributed`) each process generates and rolls out its
    share of the step's tasks and updates on it; `update_model` is the engine-wrapped policy the update runs
    (None: `policy.model`). The groups of all processes are then gathered, in task order, for the metrics and
    the adaptive sampler, so every process keeps the same sampler state and only the main one writes.
    """

    settings: TrainSettings
    cfg: TrainConfig
    policy: PolicyHandle
    executor: Executor
    roles: RoleLibrary
    tasks: Sequence[TrainTask]
    optimizer: torch.optim.Optimizer
    sampler: AdaptiveFamilySampler
    run: RunDir | None = None
    reference: Reference | None = None
    dist: Distributed = field(default_factory=Distributed)
    update_model: torch.nn.Module | None = None

    def _seed(self, name: str, step: int) -> int:
        """(seed, name, step) on one process, the same with the rank added on several (each draws its own)."""
        if self.dist.world == 1:
            return stable_seed(self.settings.seed, name, step)
        return stable_seed(self.settings.seed, name, step, "rank", self.dist.rank)

    def generate(self, step: int, chosen: Sequence[TrainTask]) -> list[list[Completion]]:
        g = self.cfg.group.group_size
        levels = self.executor.pool.level_names
        style = self.policy.prompt_style
        prompts = [self.policy.prompt_ids(policy_messages(t.prompt, self.roles, levels, style)) for t in chosen]
        comps = self.policy.sample([p for p in prompts for _ in range(g)],
                                   max_new_tokens=self.cfg.rollout.max_new_tokens,
                                   temperature=self.cfg.rollout.temperature, seed=self._seed("generate", step))
        return [comps[k * g:(k + 1) * g] for k in range(len(chosen))]

    def _step_sampler(self, step: int) -> AdaptiveFamilySampler:
        """The sampler the rollout draws from: the run's own on one process; on several, a copy with a
        per-(step, rank) stream, whose history `_sync_sampler` then rebuilds identically everywhere."""
        if self.dist.world == 1:
            return self.sampler
        mine = copy.deepcopy(self.sampler)
        mine.reseed(self._seed("sampler", step))
        return mine

    def _sync_sampler(self, groups: Sequence[GroupResult]) -> None:
        if self.dist.world > 1 and self.settings.cf:
            for g in groups:
                for smp in g.samples:
                    if smp.cf is not None:
                        self.sampler.update(smp.cf.family, smp.cf.delta, smp.cf.room)

    async def rollout(self, step: int, chosen: Sequence[TrainTask],
                      grouped: Sequence[Sequence[Completion]]) -> list[GroupResult]:
        s = self.settings
        settings = RolloutSettings(reward=self.cfg.reward, cf_enabled=s.cf, cf_budget=self.cfg.credit.cf_budget,
                                   ablation=s.ablation, worker_samples=self.cfg.workers.samples,
                                   permute_draws=self.cfg.workers.permute_draws())
        return await rollout_groups(
            self.executor, chosen, [[c.text for c in cs] for cs in grouped], roles=self.roles,
            settings=settings, sampler=self._step_sampler(step) if s.cf else None,
            rng=random.Random(self._seed("rollout", step)),
            seeds=[group_worker_seed(s.seed, t.id, step, self.cfg.workers.seeds, t.bank_seed)
                   for t in chosen])

    def update(self, batch: StepBatch) -> dict[str, float]:
        model = self.policy.model if self.update_model is None else self.update_model
        return policy_update(model, batch, self.optimizer, self.cfg, self.policy.pad_id, self.reference, self.dist,
                             decoding=self.policy.decoding)

    async def step(self, step: int) -> MetricsRow:
        s, cfg = self.settings, self.cfg
        t0 = time.perf_counter()
        chosen = [self.tasks[i] for i in task_indices(step, len(self.tasks), cfg.rollout.tasks_per_step, s.seed)]
        mine = self.dist.shard(chosen)
        grouped = self.generate(step, mine)
        t1 = time.perf_counter()
        groups = await self.rollout(step, mine, grouped)
        t2 = time.perf_counter()
        upd = self.update(build_batch(groups, grouped, cfg.credit, cf=s.cf, alternative=self.policy.alternative))
        t3 = time.perf_counter()
        if self.dist.world > 1:  # every process's groups, in task order
            groups, grouped = self.dist.gather(groups), self.dist.gather(grouped)
            self._sync_sampler(groups)
        row = step_metrics(step, groups, grouped, self.sampler if s.cf else None, cfg.sampler.families)
        row.update(upd)
        row.update({"task_ids": [t.id for t in chosen], "gen_s": t1 - t0, "exec_s": t2 - t1,
                    "update_s": t3 - t2, "step_s": t3 - t0, "processes": self.dist.world})
        if row["valid_rate"] == 0.0:
            log.warning("step %d: %s", step, INVALID_HINT)
        if self.run is not None and self.dist.is_main:
            self.run.append(self.run.metrics_path, [row])
            self.run.append(self.run.samples_path, sample_rows(step, groups))
        return row

    @property
    def engine_model(self) -> torch.nn.Module:
        """The module the update runs (DDP/FSDP-wrapped under accelerate), whose shards a checkpoint gathers."""
        return self.policy.model if self.update_model is None else self.update_model

    def save(self, step: int) -> Path:
        """Write step N's checkpoint. EVERY process calls it: under FSDP the weights and the optimizer state
        are gathered from all shards (collectives), then the main process writes; all return its path."""
        weights = self.dist.model_state(self.engine_model)
        optim = self.dist.optimizer_state(self.engine_model, self.optimizer)

        def write() -> Path:
            assert self.run is not None
            return save_checkpoint(self.run, step, self.settings.keep_checkpoints, self.policy, self.sampler,
                                   weights, optim)

        return self.dist.on_main(write)

    def restore(self, checkpoint: Path) -> int:
        """Load optimizer and sampler state of a checkpoint (the model was loaded from it); the next step."""
        return restore_checkpoint(checkpoint, self.dist, self.engine_model, self.optimizer, self.sampler)


# ---- building a run ----------------------------------------------------------------------------------


def _load_policy(s: TrainSettings, cfg: TrainConfig, checkpoint: Path | None, *, device: Any = None,
                 precision: str = "fp32") -> tuple[HFPolicy, Reference | None]:
    """The policy (and the KL reference) on `device`. Under bf16 the weights that do not train (a LoRA
    base, the frozen reference) are loaded in bf16; trained weights stay fp32 under autocast."""
    from lemon.train.policy import load_policy

    frozen_dtype = torch.bfloat16 if precision == "bf16" else None
    base_dtype = frozen_dtype if s.lora else None
    if checkpoint is None:
        model, tok = load_policy(s.policy, lora=cfg.lora if s.lora else None, dtype=base_dtype, device=device)
    elif not s.lora:
        model, tok = load_policy(str(checkpoint), device=device)
    else:
        from peft import PeftModel

        base, tok = load_policy(s.policy, dtype=base_dtype, device=device)
        model = PeftModel.from_pretrained(base, str(checkpoint), is_trainable=True)
    if cfg.optim.gradient_checkpointing:
        enable_checkpointing(model)
    reference = None
    if cfg.credit.kl_beta > 0:
        frozen = None
        if not s.lora:
            frozen, _ = load_policy(s.policy, dtype=frozen_dtype, device=device)
            frozen.eval().requires_grad_(False)
        reference = Reference(model, frozen)
    return HFPolicy(model, tok, prompt_style=_prompt_style(s, checkpoint)), reference


def _prompt_style(s: TrainSettings, checkpoint: Path | None) -> str:
    """The prompt the loaded policy was trained on: its checkpoint's, else its directory's (a named or hub
    policy was never fine-tuned by LEMON: the full prompt)."""
    source = checkpoint if checkpoint is not None else Path(s.policy).expanduser() if s.policy else None
    return read_prompt_style(source) if source is not None and source.exists() else "full"


def enable_checkpointing(model: PreTrainedModel | PeftModel) -> None:
    """Activation (gradient) checkpointing, non-reentrant, so a LoRA model needs no input gradients."""
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.2x
    if enable is not None:
        enable({"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if float(getattr(model.config, "attention_dropout", 0.0) or 0.0) > 0:
        log.warning("gradient checkpointing scores in training mode: attention_dropout %.2f will apply",
                    model.config.attention_dropout)


def _run_info(s: TrainSettings, cfg: TrainConfig, split: str, tasks: Sequence[TrainTask]) -> dict[str, Any]:
    from importlib import metadata

    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(s).items() if k != "ablation"}
    versions: dict[str, str | None] = {}
    for pkg in ("torch", "transformers", "peft", "lemon-mas"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    data = (split_record(s.benchmark, split, tasks) if split != "custom" else
            {"benchmark": s.benchmark, "split": split, "item_ids": [t.id for t in tasks]})
    return {"settings": settings, "ablation": s.ablation.as_dict(), "config": cfg.model_dump(mode="json"),
            "data": data, "versions": versions}


@dataclass(frozen=True)
class TrainSummary:
    run_dir: Path
    first_step: int
    last_step: int
    final_dir: Path
    last_metrics: MetricsRow


def _check_ablation(s: TrainSettings) -> None:
    if s.ablation.fixed_capacity is not None:
        from lemon.llm.pools import pool_level_names

        if s.ablation.fixed_capacity not in pool_level_names(s.pool):
            raise ConfigError(f"--fixed-capacity {s.ablation.fixed_capacity!r} is not a level of pool "
                              f"{s.pool!r}; valid: {', '.join(pool_level_names(s.pool))}")


def _open_run(s: TrainSettings, cfg: TrainConfig, split: str, tasks: Sequence[TrainTask],
              dist: Distributed, extra: dict[str, Any] | None = None) -> tuple[RunDir, Path | None]:
    """The run directory, opened (or checked for --resume) by the main process; its checkpoint for all."""
    run = RunDir(s.run_dir)
    info = {**_run_info(s, cfg, split, tasks), **(extra or {})}
    checkpoint = dist.on_main(lambda: run.open(info, [t.id for t in tasks], resume=s.resume))
    return run, checkpoint


async def _uncertain(s: TrainSettings, tasks: Sequence[TrainTask],
                     executor: Executor) -> tuple[list[TrainTask], dict[str, Any]]:
    """The tasks one CoT agent solves under some but not all worker seeds, and what run.json records of it."""
    from lemon.train.curriculum import uncertain_tasks

    kept, measured = await uncertain_tasks(tasks, executor, samples=s.uncertain_samples or 2, seed=s.seed)
    if not kept:
        raise LemonError(f"no training task is uncertain for one agent at {measured.level} over "
                         f"{measured.samples} worker seeds; use more tasks or another pool")
    return kept, {"uncertainty": asdict(measured)}


async def _open_trainer(s: TrainSettings, tasks: Sequence[TrainTask], split: str,
                        pool: str | None = None) -> tuple[Trainer, int]:
    """Load (or resume) everything a run needs; returns the trainer and its first step. `pool`: the pool
    file the calls go to when it is not `s.pool` itself (its served copy)."""
    from lemon.llm.pools import load_pool

    cfg = effective_config(s)
    _check_ablation(s)
    dist, precision = open_distributed(cfg.optim.precision)
    check_shares(cfg.rollout.tasks_per_step, dist.world)
    roles = RoleLibrary.load()
    executor = worker_executor(load_pool(pool or s.pool, cache=s.cache), roles, cfg)
    tasks = worker_tasks(tasks, cfg)
    extra: dict[str, Any] = {}
    if s.uncertain_samples:
        tasks, extra = await _uncertain(s, tasks, executor)
    run, checkpoint = _open_run(s, cfg, split, tasks, dist, extra)
    policy, reference = _load_policy(s, cfg, checkpoint, device=dist.device, precision=precision)
    optimizer = torch.optim.AdamW(trainable(policy.model), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    wrapped, optimizer = dist.prepare(policy.model, optimizer)
    policy.synced_gpus = dist.sharded
    if cfg.rollout.grammar:
        policy.decoding = spec_decoding(policy.model, policy.tokenizer, roles, executor.pool.level_names)
    sampler = AdaptiveFamilySampler.from_config(cfg.sampler, seed=stable_seed(s.seed, "sampler"))
    trainer = Trainer(s, cfg, policy, executor, roles, tasks, optimizer, sampler,
                      run=run if dist.is_main else None, reference=reference, dist=dist, update_model=wrapped)
    start = 1 if checkpoint is None else trainer.restore(checkpoint)
    if checkpoint is not None:
        log.info("resuming %s from step %d", s.run_dir, start - 1)
    return trainer, start


async def train(s: TrainSettings, *, tasks: Sequence[TrainTask] | None = None, split: str | None = None,
                on_step: ProgressHook | None = None) -> TrainSummary:
    """Run (or resume) GRPO training; see the module docstring. `tasks` overrides the benchmark's split."""
    if s.threads:
        torch.set_num_threads(s.threads)
    if tasks is None:
        split, tasks = load_train_tasks(s.benchmark, limit=s.limit_tasks, data_dir=s.data_dir)
    serve = wants_cuda() if s.serve_workers is None else s.serve_workers
    with workers_for(s.pool, serve, s.run_dir / "workers") as pool:
        return await _train_loop(s, list(tasks), split or "custom", pool, on_step)


async def _train_loop(s: TrainSettings, tasks: list[TrainTask], split: str, pool: str,
                      on_step: ProgressHook | None) -> TrainSummary:
    """The steps, checkpoints and final export of `train`, with the worker calls going to `pool`."""
    trainer, start = await _open_trainer(s, tasks, split, pool if pool != s.pool else None)
    last: MetricsRow = {}
    all_invalid = 0
    try:
        for step in range(start, s.steps + 1):
            last = await trainer.step(step)
            all_invalid = all_invalid + 1 if last["valid_rate"] == 0.0 else 0
            main = trainer.dist.is_main  # one process reports progress
            if step % s.save_every == 0 or step == s.steps:
                trainer.save(step)  # every process: FSDP gathers the shards, the main one writes
            if main and on_step is not None:
                on_step(step, last)
            if all_invalid >= 2 and step == start + 1:
                raise LemonError(f"steps {start}-{step}: {INVALID_HINT}")
    finally:
        await trainer.executor.pool.aclose()
    final = export_trained(trainer, s.run_dir / "final")
    return TrainSummary(s.run_dir, start, s.steps, final, last)


def export_trained(trainer: Trainer, target: Path) -> Path:
    """The run's final policy as a plain HF directory (`checkpoint.export_policy`); EVERY process calls it."""
    return export_policy(trainer.policy, trainer.dist, trainer.engine_model, target)
