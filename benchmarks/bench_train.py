"""Token cost of counterfactual credit: worker tokens per GRPO step with the counterfactual term / without.

Runs the trainer's own rollout code (`lemon.train.rollout.rollout_group`: strict parsing, ablation hook,
execution through a group-shared node cache, reward, counterfactual edits and re-runs) on the same tasks,
the same sampled specs and the same seeds, once with counterfactuals and once without; no optimiser step
is needed because the policy update does not change what a step costs in worker tokens.

The group's "sampled" specs are canonical renderings of seeded random teams (2-4 agents, every agent with a
duty, random levels and a random DAG), i.e. what a warm-started policy writes; so every edit family has
fields to edit. Workers: the REAL `tiny` pool (SmolLM2-135M through llama.cpp on every level, greedy, LLM
cache off) by default, or `--pool scripted`, a scripted test double with a DIFFERENT model per level (so a
capacity edit is never free, unlike in `tiny` where all levels share one model).

Prints:
    CF <ratio>  worker tokens per step with CF / without, target <= 1.15
    CF-edited <fraction>  valid specs that got a counterfactual (the ratio above means little without it;
                          target >= 0.9)
    CF-hit <rate>  node-cache hit rate in counterfactual re-runs
    CF-uncapped <ratio>  (the same with credit.cf_budget = null: a counterfactual for every valid spec)
    P5 <ratio>  LEMON GRPO step throughput / TRL GRPOTrainer, same policy, batch, group and reward (>= 1.0)
                (and LEMON's seconds per step split into generation / execution / update)
Run: `python benchmarks/bench_train.py [--tasks 4] [--group 4] [--pool tiny|scripted] [--data-dir DIR]
[--only cf|p5]` (tiny: each pass executes 16 specs with real SmolLM2 workers, a few minutes per pass on 2 cores;
`--quick` skips the uncapped pass; `--pool scripted` takes seconds; P5 takes ~15 minutes on 2 cores).

P5 (the trainer itself, `lemon.train.grpo.Trainer` against TRL 1.16's `GRPOTrainer`): the same SmolLM2-135M
policy (fp32, 2 threads), the same GSM8K train prompts in the same order (LEMON's policy prompt as chat
messages), group 4, `--p5-tasks` prompts per optimiser step, 64 new tokens at temperature 1, AdamW lr 1e-5,
KL beta 0.04 to a frozen copy, micro-batches of 4 (TRL: per-device batch 4 x 2 accumulation steps, one
generation of 8 per step), dropout off, no gradient checkpointing, no bf16. Reward: the same cheap function of
the completion text for both (`text_reward`); LEMON's rollout still runs its real parse / execute / reward path
with the scripted pool (near free) and the text reward is added to it, so both trainers update on the same
signal. One warm-up step each, then `--p5-steps` timed steps; throughput = steps per second.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path

from lemon.errors import run_script
from lemon.llm.base import GenParams
from lemon.llm.pool import Level, Pool
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.spec.model import Agent, Spec
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.config import load_train_config
from lemon.train.rollout import GroupResult, RolloutSettings, rollout_group
from lemon.train.sampler import AdaptiveFamilySampler
from lemon.train.tasks import TrainTask, load_train_tasks

log = logging.getLogger("bench_train")

TARGET = 1.15
EDITED_TARGET = 0.9
ROLES = ("analyst", "math_solver", "critic", "planner", "generalist")
DUTIES = ("List the quantities and what is asked.", "Solve the problem step by step.",
          "Check the arithmetic and correct mistakes.", "Give the final number only.",
          "Plan the steps to the answer.")
LEVELS = ("small", "medium", "large")


def random_team(rng: random.Random) -> Spec:
    """A valid team of 2-4 agents: each depends on a non-empty subset of earlier ones; the last is the output."""
    n = rng.randint(2, 4)
    names = [f"a{i}" for i in range(n)]
    agents = []
    for i, name in enumerate(names):
        deps = tuple(sorted(rng.sample(names[:i], rng.randint(1, i)))) if i else ()
        agents.append(Agent(name=name, role=rng.choice(ROLES), duty=rng.choice(DUTIES),
                            capacity=rng.choice(LEVELS), depends_on=deps))
    return Spec(agents=tuple(agents), output=names[-1])


def scripted_pool() -> Pool:
    """A different deterministic model per level; replies of ~40 words so parents' outputs cost tokens."""

    def reply(model: str):  # type: ignore[no-untyped-def]
        def respond(req) -> str:  # type: ignore[no-untyped-def]
            key = "\x00".join((model, req.messages[0].content, req.messages[-1].content))
            h = int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) % 1000
            return f"Working through it ({model}): " + " ".join(f"step{k}" for k in range(30)) + f" answer {h}"
        return respond

    return Pool("scripted", tuple(Level(lv, ScriptedBackend(f"scripted-{lv}", responder=reply(lv)), 4)
                                  for lv in LEVELS), GenParams(max_tokens=128))


@dataclass
class Totals:
    worker_tokens: int = 0
    rollout_tokens: int = 0
    cf_tokens: int = 0
    cf_hits: int = 0
    cf_calls: int = 0
    cf_count: int = 0
    steps: int = 0

    def add(self, g: GroupResult) -> None:
        self.steps += 1
        for s in g.samples:
            self.rollout_tokens += s.spent_tokens
            if s.cf is not None:
                self.cf_tokens += s.cf.spent_tokens
                self.cf_hits += s.cf.cache_hits
                self.cf_calls += s.cf.calls
                self.cf_count += 1
        self.worker_tokens = self.rollout_tokens + self.cf_tokens


async def run_pass(pool: Pool, tasks: list[TrainTask], completions: list[list[str]], *, cf: bool,
                   budget: float | None, seed: int) -> Totals:
    cfg = load_train_config()
    roles = RoleLibrary.load()
    executor = Executor(pool, roles)
    sampler = AdaptiveFamilySampler.from_config(cfg.sampler, seed=seed)
    settings = RolloutSettings(reward=cfg.reward, cf_enabled=cf, cf_budget=budget)
    totals = Totals()
    for k, (task, comps) in enumerate(zip(tasks, completions, strict=True)):
        g = await rollout_group(executor, task, comps, roles=roles, settings=settings,
                                sampler=sampler if cf else None, rng=random.Random(seed * 1000 + k), seed=seed)
        totals.add(g)
        log.info("task %s: rollout %d tokens, cf %d tokens (%s)", task.id,
                 sum(s.spent_tokens for s in g.samples),
                 sum(s.cf.spent_tokens for s in g.samples if s.cf), [s.cf_skip for s in g.samples])
    return totals


async def main_async(args: argparse.Namespace) -> None:
    from lemon.llm.pools import load_pool

    _, tasks = load_train_tasks("gsm8k", limit=args.tasks, data_dir=args.data_dir)
    rng = random.Random(args.seed)
    completions = [[render_spec(random_team(rng)).text for _ in range(args.group)] for _ in tasks]
    budget = load_train_config().credit.cf_budget

    def make_pool() -> Pool:
        return scripted_pool() if args.pool == "scripted" else load_pool(args.pool, cache=False)

    async def run(cf: bool, b: float | None) -> Totals:
        pool = make_pool()
        t0 = time.perf_counter()
        try:
            totals = await run_pass(pool, tasks, completions, cf=cf, budget=b, seed=args.seed)
        finally:
            await pool.aclose()
        log.info("cf=%s budget=%s: %s in %.1fs", cf, b, totals, time.perf_counter() - t0)
        return totals

    without = await run(False, budget)
    w = await run(True, budget)
    base = without.worker_tokens / without.steps
    ratio = w.worker_tokens / w.steps / base
    hit = w.cf_hits / (w.cf_hits + w.cf_calls) if w.cf_hits + w.cf_calls else 0.0
    print(f"CF {ratio:.3f}  worker tokens per step with CF / without, target <= {TARGET} "
          f"(pool {args.pool}, cf_budget {budget}, {w.cf_count} counterfactuals over {w.steps} steps "
          f"of group {args.group})", flush=True)
    valid = w.steps * args.group  # every sampled team here is valid
    print(f"CF-edited {w.cf_count / valid:.3f}  valid specs that got a counterfactual, target >= {EDITED_TARGET}",
          flush=True)
    print(f"CF-hit {hit:.3f}  node-cache hit rate in counterfactual re-runs", flush=True)
    if not args.quick:
        u = await run(True, None)
        print(f"CF-uncapped {u.worker_tokens / u.steps / base:.3f}  the same with cf_budget null "
              f"({u.cf_count} counterfactuals, {u.cf_count / valid:.2f} of valid specs edited)")


# ---- P5: LEMON's trainer against TRL's GRPOTrainer ------------------------------------------------------

P5_TARGET = 1.0


def text_reward(text: str) -> float:
    """The cheap reward both trainers get: deterministic in the text, different across a group's samples."""
    return (sum(map(ord, text)) % 101) / 100.0


@dataclass
class P5Setup:
    """What both trainers share: prompts in step order (chat messages), sizes, and the LEMON config."""

    tasks: list[TrainTask]
    messages: list[list[dict[str, str]]]  # TRL's dataset, in the order LEMON's steps take the tasks
    steps: int
    per_step: int
    group: int = 4
    max_new_tokens: int = 64
    lr: float = 1e-5
    kl_beta: float = 0.04


def p5_setup(args: argparse.Namespace) -> P5Setup:
    from lemon.orchestrator.policy_prompt import policy_messages
    from lemon.train.batch import task_indices

    steps = args.p5_steps + 1  # one warm-up step
    _, tasks = load_train_tasks("gsm8k", limit=steps * args.p5_tasks, data_dir=args.data_dir)
    roles = RoleLibrary.load()
    order = [i for st in range(1, steps + 1) for i in task_indices(st, len(tasks), args.p5_tasks, args.seed)]
    messages = [policy_messages(tasks[i].prompt, roles, LEVELS) for i in order]
    return P5Setup(list(tasks), messages, steps, args.p5_tasks, max_new_tokens=args.p5_new_tokens)


def timed_generate(model: object, spent: list[float]) -> None:
    """Wrap `model.generate` so each call's seconds are recorded (both trainers call it on this object)."""
    inner = model.generate  # type: ignore[attr-defined]

    def generate(*a: object, **kw: object) -> object:
        t0 = time.perf_counter()
        try:
            return inner(*a, **kw)
        finally:
            spent.append(time.perf_counter() - t0)

    model.generate = generate  # type: ignore[attr-defined]


def lemon_trainer(setup: P5Setup, seed: int):  # type: ignore[no-untyped-def]
    """The real `Trainer` with the SmolLM2 policy, the scripted pool, and the text reward added."""
    import torch

    from lemon.train.config import TrainConfig
    from lemon.train.grpo import Trainer
    from lemon.train.policy import load_policy
    from lemon.train.policy_handle import HFPolicy, Reference
    from lemon.train.settings import TrainSettings
    from lemon.train.workers import worker_executor

    class TextRewardTrainer(Trainer):
        async def rollout(self, step, chosen, grouped):  # type: ignore[no-untyped-def]
            groups = await super().rollout(step, chosen, grouped)
            for g in groups:
                for smp in g.samples:
                    smp.reward = replace(smp.reward, total=smp.reward.total + text_reward(smp.completion))
            return groups

    cfg = TrainConfig.model_validate({
        "group": {"group_size": setup.group}, "credit": {"kl_beta": setup.kl_beta},
        "rollout": {"tasks_per_step": setup.per_step, "max_new_tokens": setup.max_new_tokens, "temperature": 1.0},
        "optim": {"lr": setup.lr, "micro_batch": 4, "epochs": 1}})
    model, tok = load_policy()
    frozen, _ = load_policy()
    frozen.eval().requires_grad_(False)
    roles = RoleLibrary.load()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=setup.lr)
    sampler = AdaptiveFamilySampler.from_config(cfg.sampler, seed=seed)
    return TextRewardTrainer(TrainSettings(run_dir=Path("bench-p5"), seed=seed), cfg, HFPolicy(model, tok),
                             worker_executor(scripted_pool(), roles, cfg), roles, setup.tasks, opt, sampler,
                             reference=Reference(model, frozen))


async def time_lemon(setup: P5Setup, seed: int) -> dict[str, float]:
    """Seconds per timed step, in total and per phase (the first step is a warm-up)."""
    trainer = lemon_trainer(setup, seed)
    rows = []
    try:
        for step in range(1, setup.steps + 1):
            rows.append(await trainer.step(step))
            log.info("LEMON step %d: %.1fs (gen %.1f exec %.2f update %.1f) updated %s", step, rows[-1]["step_s"],
                     rows[-1]["gen_s"], rows[-1]["exec_s"], rows[-1]["update_s"], rows[-1]["updated"])
    finally:
        await trainer.executor.pool.aclose()
    timed = rows[1:]
    return {k: sum(r[k] for r in timed) / len(timed) for k in ("step_s", "gen_s", "exec_s", "update_s", "updated")}


def trl_reward(completions: list, **_: object) -> list[float]:  # type: ignore[type-arg]
    """TRL's reward function: the same `text_reward` (conversational completions are message lists)."""
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    return [text_reward(t) for t in texts]


def time_trl(setup: P5Setup, seed: int, workdir: str) -> dict[str, float]:
    """TRL's GRPOTrainer on the same policy, prompts, group, batch and reward; seconds per timed step."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from lemon.train.policy import load_policy

    model, tok = load_policy()
    gen: list[float] = []
    timed_generate(model, gen)
    steps: list[tuple[float, float]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):  # type: ignore[no-untyped-def]
            self.t0, self.g0 = time.perf_counter(), sum(gen)

        def on_step_end(self, *a, **k):  # type: ignore[no-untyped-def]
            steps.append((time.perf_counter() - self.t0, sum(gen) - self.g0))
            log.info("TRL step %d: %.1fs (generation %.1fs)", len(steps), *steps[-1])

    cfg = GRPOConfig(
        output_dir=workdir, max_steps=setup.steps, learning_rate=setup.lr, num_generations=setup.group,
        per_device_train_batch_size=4, gradient_accumulation_steps=setup.per_step * setup.group // 4,
        max_completion_length=setup.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0, beta=setup.kl_beta,
        shuffle_dataset=False, bf16=False, gradient_checkpointing=False, use_cpu=True, report_to="none",
        logging_steps=10_000, save_strategy="no", seed=seed, disable_tqdm=True, dataloader_pin_memory=False,
        max_grad_norm=1.0, optim="adamw_torch", lr_scheduler_type="constant", warmup_steps=0)
    data = Dataset.from_list([{"prompt": m} for m in setup.messages])
    trainer = GRPOTrainer(model=model, reward_funcs=trl_reward, args=cfg, train_dataset=data,
                          processing_class=tok, callbacks=[Clock()])
    trainer.train()
    timed = steps[1:]
    return {"step_s": sum(t for t, _ in timed) / len(timed), "gen_s": sum(g for _, g in timed) / len(timed)}


async def p5_async(args: argparse.Namespace) -> None:
    import tempfile

    import torch

    torch.set_num_threads(2)
    setup = p5_setup(args)
    lemon = await time_lemon(setup, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        trl = time_trl(setup, args.seed, tmp)
    ratio = trl["step_s"] / lemon["step_s"]
    print(f"P5 {ratio:.2f}  LEMON GRPO step throughput / TRL GRPOTrainer, same policy, batch, group and reward "
          f"(target >= {P5_TARGET}; {setup.per_step} prompts x group {setup.group}, {setup.max_new_tokens} new "
          f"tokens, {args.p5_steps} timed steps after 1 warm-up)", flush=True)
    print(f"P5-lemon {lemon['step_s']:.1f} s/step  = generation {lemon['gen_s']:.1f} + execution "
          f"{lemon['exec_s']:.2f} + update {lemon['update_s']:.1f} (steps with an update: "
          f"{lemon['updated']:.0%})", flush=True)
    print(f"P5-trl {trl['step_s']:.1f} s/step  (generation {trl['gen_s']:.1f}, the rest scoring + update)",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=4, help="GSM8K train items (one step each)")
    ap.add_argument("--group", type=int, default=4, help="specs per step")
    ap.add_argument("--pool", default="tiny", help="tiny (real SmolLM2), cpu, a pool YAML, or scripted")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--quick", action="store_true", help="skip the uncapped pass")
    ap.add_argument("--only", choices=("cf", "p5"), default=None, help="run only the CF or the P5 measurement")
    ap.add_argument("--p5-tasks", type=int, default=2, help="P5: prompts per optimiser step (each x group 4)")
    ap.add_argument("--p5-steps", type=int, default=3, help="P5: timed steps per trainer (after 1 warm-up)")
    ap.add_argument("--p5-new-tokens", type=int, default=64, help="P5: max new tokens per completion")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if args.only != "p5":
        asyncio.run(main_async(args))
    if args.only != "cf":
        asyncio.run(p5_async(args))


if __name__ == "__main__":
    run_script(main)
