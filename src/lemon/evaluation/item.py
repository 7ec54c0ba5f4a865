"""The unit of work of an evaluation: one (item, seed) run by `run_item(ctx, item, seed)`.

`EvalSettings` says what is evaluated (picklable: it travels to Ray workers); `build_context` turns it into an
`ItemContext` (pool, roles, executor, the method's spec writer) once per process, because pools hold live
connections and are not picklable. Both drivers stand on these three names: the local one in `evaluate.py`
and the Ray one in `scale.py`; neither knows the other.

Why workers sample at temperature 0.7 by default, with a per-seed sampling seed: with greedy decoding every
"seed" would produce the same text, so the std over seeds would be 0 by construction and say nothing, and
self-consistency (sc-cot) would vote over five identical answers. With a seeded sampler each seed is a real
replicate and still exactly reproducible (each (item, seed) pair gets its own worker seed, the runtime derives
a per-agent seed from it, and the LLM cache is keyed on it). Use `--temperature 0` for greedy decoding (then
use one seed). The prompted orchestrator itself writes its spec greedily; seeds vary the workers.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lemon.benchmarks.base import Benchmark, Item
from lemon.benchmarks.registry import get_benchmark
from lemon.errors import ConfigError, LemonError
from lemon.evaluation.methods import Method, MethodEnv, SpecWriter, Written
from lemon.evaluation.store import ItemRow
from lemon.llm.defaults import DEFAULT_TEMPERATURE
from lemon.llm.pool import Pool
from lemon.orchestrator.base import Proposal
from lemon.runtime.budget import Budget, BudgetExhausted, TokenLedger
from lemon.runtime.executor import Executor
from lemon.seeds import stable_seed
from lemon.spec.roles import RoleLibrary

PoolFactory = Callable[[], Pool]

# Budgets reserve before each call (they used to be checked after it, and overshot): a budgeted run's results
# depend on the rule, so runs with --budget-tokens carry it in their id (runs without one keep theirs).
BUDGET_RULE = "reserve"
# How worker sampling seeds are derived; part of every run's identity, so a run sampled under an older scheme
# is never resumed into, or mixed with, a new one: one stream per seed shared by all items (before 2026-11-22),
# then per item with each agent's seed from its name ("per-item", before 2026-11-24), now per item with each
# agent's seed from its role and rank among that role's agents (`runtime.executor.sample_slot`: the sample bank).
WORKER_SEEDS = "per-item-role-rank"


class EvalBudgetSpent(LemonError):
    """`--budget-tokens-total` cannot pay for (the rest of) an item: it is not computed, nor stored."""


def item_seed(benchmark: str, item_id: str, seed: int) -> int:
    """The sampling seed of one (item, seed), for the orchestrator and the workers alike.

    One stream shared by every item of a seed (the run seed alone) couples the items: the same random draws
    make the same choices everywhere, so a seed's accuracy swings as one block (measured: 0% vs 40% between
    two seeds of vanilla on MultiArith).
    """
    return stable_seed(benchmark, item_id, seed)


def pool_identity(pool: str) -> str:
    """What identifies a pool in a run id: the name of a built-in pool, or the sha256 of a pool file.

    Hashing the file's content (not its path) means editing a pool YAML starts a new run instead of
    silently resuming into results produced by other models.
    """
    path = Path(pool).expanduser()
    if path.is_file():
        return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return pool


@dataclass(frozen=True)
class EvalSettings:
    """What a worker needs to rebuild the evaluation context (picklable: it travels to Ray workers)."""

    benchmark: str
    method: Method
    level: str
    pool: str
    temperature: float = DEFAULT_TEMPERATURE
    max_tokens: int | None = None
    n_agents: int | None = None
    budget_tokens: int | None = None
    call_timeout_s: float | None = None
    cache: bool = True
    check_concurrency: int = max(1, (os.cpu_count() or 2) // 2)

    def identity(self) -> dict[str, object]:
        """The fields that change results (they go into the run id; concurrency and paths do not)."""
        identity: dict[str, object] = {
            "temperature": self.temperature, "max_tokens": self.max_tokens, "n_agents": self.n_agents,
            "budget_tokens": self.budget_tokens, "call_timeout_s": self.call_timeout_s, "worker_seeds": WORKER_SEEDS}
        if self.budget_tokens is not None:
            identity["budget_rule"] = BUDGET_RULE
        method = self.method.identity()
        if method is not None:  # only orchestrators carry it (their teams, their fallback): baseline ids stay
            identity["policy"] = method
        return identity


@dataclass
class ItemContext:
    """Everything `run_item` needs, built once per process (locally, or once per Ray worker)."""

    settings: EvalSettings
    task: Benchmark
    pool: Pool
    roles: RoleLibrary
    executor: Executor
    writer: SpecWriter
    eval_budget: TokenLedger | None = None  # the whole run's cap (--budget-tokens-total), local runs only
    check_sem: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.check_sem = asyncio.Semaphore(self.settings.check_concurrency)

    async def aclose(self) -> None:
        await self.pool.aclose()


def default_pool_factory(settings: EvalSettings) -> PoolFactory:
    """`load_pool(settings.pool, cache=settings.cache)` as a picklable zero-argument factory."""
    from lemon.llm.pools import load_pool

    return functools.partial(load_pool, settings.pool, cache=settings.cache)


def build_context(settings: EvalSettings, pool_factory: PoolFactory | None = None) -> ItemContext:
    """Build the pool, role library, executor and the method's spec writer of an evaluation."""
    task = get_benchmark(settings.benchmark)
    pool = (pool_factory or default_pool_factory(settings))()
    if settings.level not in pool.level_names:
        raise ConfigError(f"--level {settings.level!r} is not a level of pool {pool.name!r}; "
                          f"valid: {', '.join(pool.level_names)}")
    roles = RoleLibrary.load()
    params = pool.params(temperature=settings.temperature, max_tokens=settings.max_tokens)
    executor = Executor(pool, roles, budget=Budget(max_tokens=settings.budget_tokens,
                                                   call_timeout_s=settings.call_timeout_s), params=params)
    writer = settings.method.bind(MethodEnv(pool=pool, roles=roles, kind=task.kind, level=settings.level,
                                            n_agents=settings.n_agents))
    return ItemContext(settings=settings, task=task, pool=pool, roles=roles, executor=executor, writer=writer)


async def _check(ctx: ItemContext, prediction: str, item: Item) -> bool:
    """The benchmark's checker; sandboxed checks (code) run off the event loop, a few at a time."""
    if ctx.task.sandboxed:
        async with ctx.check_sem:
            return bool(await asyncio.to_thread(ctx.task.check, prediction, item))
    return bool(ctx.task.check(prediction, item))


async def run_item(ctx: ItemContext, item: Item, seed: int) -> ItemRow:
    """Run one (item, seed): write the spec, execute it, extract, check; the row carries the trace (compact
    JSON) to the store, which keeps it beside the row (`lemon trace` shows it).

    A method that fails to write a spec (an orchestrator unreachable, or a reply that is not a chat
    completion) makes an `error` row, like a failing worker; `EvalBudgetSpent` when the evaluation's token
    cap cannot pay for the item."""
    task = ctx.task
    prompt = task.prompt(item)
    start = time.perf_counter()
    sampling_seed = item_seed(ctx.settings.benchmark, item.id, seed)
    try:
        written = await ctx.writer.write(prompt, seed=sampling_seed, ledger=ctx.eval_budget)
    except BudgetExhausted as exc:
        raise EvalBudgetSpent(str(exc)) from None
    except LemonError as exc:
        return _error_row(item, seed, f"orchestrator: {exc}", time.perf_counter() - start)
    result = await ctx.executor.run(written.spec, prompt, seed=sampling_seed,
                                    vote_key=lambda text: task.extract(text, item),
                                    task_id=str(item.id), shared_budget=ctx.eval_budget,
                                    orchestrator=_orchestrator_info(written))
    if result.status == "budget_exceeded" and result.budget_scope == "eval":
        raise EvalBudgetSpent(result.stop_reason)
    prediction = task.extract(result.answer, item) if result.answer else None
    correct = await _check(ctx, prediction, item) if prediction is not None else False
    result.trace.rewards = {"correct": float(correct)}
    return ItemRow(item_id=str(item.id), seed=seed, prediction=prediction, gold=_gold(item), correct=correct,
                   tokens={str(k): v for k, v in result.tokens_by_agent.items()},
                   total_tokens=int(result.total_tokens), latency_s=time.perf_counter() - start,
                   trace_id=result.trace.trace_id, status=str(result.status), stop_reason=result.stop_reason,
                   orchestrator_tokens=0 if written.proposal is None else written.proposal.tokens,
                   trace_json=result.trace.compact_json())


def _orchestrator_info(written: Written) -> dict[str, object] | None:
    return None if written.proposal is None else proposal_info(written.proposal)


def proposal_info(proposal: Proposal) -> dict[str, object]:
    """What the trace keeps of how the spec was written: the orchestrator's raw output, repairs, tokens."""
    return {"source": proposal.source, "raw": proposal.raw, "warnings": list(proposal.warnings),
            "prompt_tokens": proposal.prompt_tokens, "completion_tokens": proposal.completion_tokens,
            "tokens": proposal.tokens, **{k: v for k, v in proposal.extra.items() if k != "raw"}}


def _error_row(item: Item, seed: int, reason: str, latency_s: float) -> ItemRow:
    """The row of an item that failed before its spec ran (nothing to score, no trace)."""
    return ItemRow(item_id=str(item.id), seed=seed, prediction=None, gold=_gold(item), correct=False, tokens={},
                   total_tokens=0, latency_s=latency_s, trace_id=None, status="error", stop_reason=reason)




def _gold(item: Item) -> str | None:
    text = str(item.answer)
    return text if len(text) <= 2000 else text[:2000] + "..."
