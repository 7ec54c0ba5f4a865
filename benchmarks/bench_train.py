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
Run: `python benchmarks/bench_train.py [--tasks 4] [--group 4] [--pool tiny|scripted] [--data-dir DIR]`
(tiny: each pass executes 16 specs with real SmolLM2 workers, a few minutes per pass on 2 cores; `--quick`
skips the uncapped pass; `--pool scripted` takes seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import random
import time
from dataclasses import dataclass

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=4, help="GSM8K train items (one step each)")
    ap.add_argument("--group", type=int, default=4, help="specs per step")
    ap.add_argument("--pool", default="tiny", help="tiny (real SmolLM2), cpu, a pool YAML, or scripted")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--quick", action="store_true", help="skip the uncapped pass")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
