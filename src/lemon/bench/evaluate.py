"""Evaluate a method on a benchmark split: bounded-concurrency async runs, each result stored as it finishes.

One evaluation = one run in the results store (see `store.py`): the first `limit` items of the split in its
fixed order, times seeds 0..seeds-1. Re-running the same command resumes; only missing (item, seed) pairs
are computed. Every method is a spec on the same runtime (`Executor`) and pool: a baseline spec
(`baselines.py`), the prompted orchestrator's spec, or the trained orchestrator's spec.

Why workers sample at temperature 0.7 by default, with a per-seed sampling seed: with greedy decoding every
"seed" would produce the same text, so the std over seeds would be 0 by construction and say nothing, and
self-consistency (sc-cot) would vote over five identical answers. With a seeded sampler each seed is a real
replicate and still exactly reproducible (each (item, seed) pair gets its own worker seed, the runtime derives
a per-agent seed from it, and the LLM cache is keyed on it). Use `--temperature 0` for greedy decoding (then
use one seed). The prompted orchestrator itself writes its spec greedily; seeds vary the workers.

Exit status of `lemon eval` (`exit_status`): 0 when every requested item has a result and none ended in error;
3 (`EXIT_ITEMS_IN_ERROR`) when some items of the run ended in error (an endpoint or model failed on them: they
are counted and shown, the others are scored); 4 (`EXIT_BUDGET_SPENT`) when `--budget-tokens-total` ran out
before every item was computed. 2 stays the code of bad input and broken setups (`LemonError`).

`--budget-tokens-total` caps the tokens of a whole run (workers and orchestrator, items stored by earlier
invocations included). It never clips a call: a call it cannot pay for in full is refused, and the item it
belonged to is not stored (it would be a result of the cap, not of the method), so the cap decides HOW MANY
items are computed, never what an item scores; that is why it is not part of the run id and a larger cap
resumes the same run.

The per-item function `run_item(ctx, item, seed)` is the unit of work; `ItemContext` holds what it needs
(pool, executor, task, orchestrator) and is built by `build_context(settings, pool_factory)`, both locally
and inside each Ray worker (`scale.py`), because pools hold live connections and are not picklable.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import json
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from lemon.bench.baselines import baseline_spec, method_names
from lemon.bench.report import RunStats, run_stats
from lemon.bench.store import ItemRow, ResultsStore, make_run_id, new_claim_owner
from lemon.errors import ConfigError, LemonError
from lemon.llm.base import GenParams, Message
from lemon.llm.pool import Pool
from lemon.runtime.budget import (
    BudgetExhausted,
    TokenLedger,
    check_positive_int,
    check_timeout,
    prompt_token_bound,
)

log = logging.getLogger(__name__)

PoolFactory = Callable[[], Pool]

DEFAULT_TEMPERATURE = 0.7
# Abort when this many first results of an invocation ALL end in `error`: that is a broken setup
# (unreachable endpoint, missing model), not a method that is wrong, and should not fill the store.
FAIL_FAST_ERRORS = 8
EXIT_ITEMS_IN_ERROR = 3
EXIT_BUDGET_SPENT = 4
# Budgets reserve before each call (they used to be checked after it, and overshot): a budgeted run's results
# depend on the rule, so runs with --budget-tokens carry it in their id (runs without one keep theirs).
BUDGET_RULE = "reserve"


class EvalBudgetSpent(LemonError):
    """`--budget-tokens-total` cannot pay for (the rest of) an item: it is not computed, nor stored."""


def method_choices() -> tuple[str, ...]:
    """Valid `--method` values (as shown in error messages)."""
    return (*method_names(), "template", "prompted", "trained:PATH")


def check_method(method: str) -> None:
    """Raise a one-line LemonError naming the valid methods if `method` is not one."""
    if method in method_names() or method in ("template", "prompted"):
        return
    if method.startswith("trained:") and len(method) > len("trained:"):
        return
    raise LemonError(f"unknown method {method!r}; valid: {', '.join(method_choices())}")


def get_task(benchmark: str) -> Any:
    """The `BenchmarkTask` of `benchmark`, or a one-line LemonError listing the valid names."""
    from lemon.bench.tasks import BENCHMARKS

    try:
        return BENCHMARKS[benchmark]
    except KeyError:
        raise LemonError(f"unknown benchmark {benchmark!r}; valid: {', '.join(sorted(BENCHMARKS))}") from None


# How worker sampling seeds are derived; part of every run's identity, so a run sampled under an older scheme
# (one stream per seed, shared by all items: before 2026-11-22) is never resumed into, or mixed with, a new one.
WORKER_SEEDS = "per-item"


def stable_seed(*parts: object) -> int:
    """A platform-independent 31-bit integer from `parts` (Python's hash() is salted per process)."""
    digest = hashlib.sha256("\x00".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def pool_identity(pool: str) -> str:
    """What identifies a pool in a run id: the name of a built-in pool, or the sha256 of a pool file.

    Hashing the file's content (not its path) means editing a pool YAML starts a new run instead of
    silently resuming into results produced by other models.
    """
    path = Path(pool).expanduser()
    if path.is_file():
        return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return pool


def policy_identity(method: str) -> str | None:
    """For `trained:PATH`, the sha256 of the policy's weights and config; None for every other method.

    The path alone does not identify a policy (lemon train rewrites `final/` in place), so, as with pool files,
    a different model at the same path starts a new run instead of resuming into another model's results.
    """
    if not method.startswith("trained:"):
        return None
    from lemon.orchestrator.trained import resolve_policy_path

    path = resolve_policy_path(method.split(":", 1)[1])
    files = [path] if path.is_file() else sorted(
        f for f in path.iterdir() if f.suffix in {".safetensors", ".bin", ".gguf"} or f.name == "config.json")
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode("utf-8") + b"\x00")
        with f.open("rb") as fh:
            for block in iter(functools.partial(fh.read, 1 << 22), b""):
                digest.update(block)
    return "sha256:" + digest.hexdigest()[:16]


@dataclass(frozen=True)
class EvalSettings:
    """What a worker needs to rebuild the evaluation context (picklable: it travels to Ray workers)."""

    benchmark: str
    method: str
    level: str
    pool: str
    temperature: float = DEFAULT_TEMPERATURE
    max_tokens: int | None = None
    n_agents: int | None = None
    budget_tokens: int | None = None
    call_timeout_s: float | None = None
    cache: bool = True
    check_concurrency: int = max(1, (os.cpu_count() or 2) // 2)

    def identity(self) -> dict[str, Any]:
        """The fields that change results (they go into the run id; concurrency and paths do not)."""
        identity = {"temperature": self.temperature, "max_tokens": self.max_tokens, "n_agents": self.n_agents,
                    "budget_tokens": self.budget_tokens, "call_timeout_s": self.call_timeout_s,
                    "worker_seeds": WORKER_SEEDS}
        if self.budget_tokens is not None:
            identity["budget_rule"] = BUDGET_RULE
        policy = policy_identity(self.method)
        if policy is not None:  # only trained runs carry it, so other run ids stay as they were
            identity["policy"] = policy
        return identity


@dataclass
class ItemContext:
    """Everything `run_item` needs, built once per process (locally, or once per Ray worker)."""

    settings: EvalSettings
    task: Any
    pool: Pool
    roles: Any
    executor: Any
    orchestrator: Any | None
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
    """Build the pool, role library, executor and (for `prompted`) orchestrator of an evaluation."""
    from lemon.runtime import Budget, Executor
    from lemon.spec.roles import RoleLibrary

    check_method(settings.method)
    task = get_task(settings.benchmark)
    pool = (pool_factory or default_pool_factory(settings))()
    if settings.level not in pool.level_names:
        raise ConfigError(f"--level {settings.level!r} is not a level of pool {pool.name!r}; "
                          f"valid: {', '.join(pool.level_names)}")
    roles = RoleLibrary.load()
    base = {f: getattr(pool.defaults, f) for f in pool.defaults.__dataclass_fields__}
    base["temperature"] = settings.temperature
    if settings.max_tokens is not None:
        base["max_tokens"] = settings.max_tokens
    executor = Executor(pool, roles, budget=Budget(max_tokens=settings.budget_tokens,
                                                   call_timeout_s=settings.call_timeout_s),
                        params=GenParams(**base))
    orchestrator = None
    if settings.method == "template":
        from lemon.orchestrator.template import TemplateOrchestrator

        orchestrator = TemplateOrchestrator(roles, pool.level_names)
    elif settings.method == "prompted":
        from lemon.orchestrator.prompted import PromptedOrchestrator

        orchestrator = PromptedOrchestrator(pool, roles)
    elif settings.method.startswith("trained:"):
        from lemon.orchestrator.trained import TrainedOrchestrator  # resolves the path; says if it is missing

        orchestrator = TrainedOrchestrator(settings.method.split(":", 1)[1], roles, pool.level_names)
    return ItemContext(settings=settings, task=task, pool=pool, roles=roles, executor=executor,
                       orchestrator=orchestrator)




async def _check(ctx: ItemContext, prediction: str, item: Any) -> bool:
    """The benchmark's checker; code checks run the sandbox off the event loop, a few at a time."""
    check = ctx.task.check
    if inspect.iscoroutinefunction(check):
        async with ctx.check_sem:
            return bool(await check(prediction, item))
    if ctx.task.kind == "code":
        async with ctx.check_sem:
            return bool(await asyncio.to_thread(check, prediction, item))
    return bool(check(prediction, item))


def spec_for(ctx: ItemContext, item: Any, seed: int) -> Any:
    """The validated baseline spec for (item, seed); `random` draws its graph from (item, seed)."""
    from lemon.spec.validate import validate_spec

    s = ctx.settings
    graph_seed = stable_seed(s.benchmark, item.id, seed) if s.method == "random" else seed
    spec = baseline_spec(s.method, ctx.task.kind, level=s.level, seed=graph_seed, n=s.n_agents)
    return validate_spec(spec, ctx.roles, ctx.pool.level_names)


async def run_item(ctx: ItemContext, item: Any, seed: int) -> ItemRow:
    """Run one (item, seed): build or propose the spec, execute it, extract, check; the row carries the trace
    (compact JSON) to the store, which keeps it beside the row (`lemon trace` shows it).

    An orchestrator that fails (unreachable, or a reply that is not a chat completion) makes an `error` row,
    like a failing worker; `EvalBudgetSpent` when the evaluation's token cap cannot pay for the item."""
    s = ctx.settings
    task = ctx.task
    prompt = task.format_prompt(item)
    start = time.perf_counter()
    orch_tokens = 0
    orch_info: dict[str, Any] | None = None
    # Each (item, seed) gets its own sampling stream, for the orchestrator and the workers alike. One stream
    # shared by every item of a seed (the run seed alone) couples the items: the same random draws make the
    # same choices everywhere, so a seed's accuracy swings as one block (measured: 0% vs 40% between two
    # seeds of vanilla on MultiArith).
    item_seed = stable_seed(s.benchmark, item.id, seed)
    if ctx.orchestrator is not None:
        try:
            proposal = await _propose(ctx, prompt, item_seed)
        except BudgetExhausted as exc:
            raise EvalBudgetSpent(str(exc)) from None
        except LemonError as exc:
            return _error_row(item, seed, f"orchestrator: {exc}", time.perf_counter() - start)
        spec = proposal.spec
        orch_tokens = int(proposal.tokens)
        orch_info = proposal_info(proposal)
    else:
        spec = spec_for(ctx, item, seed)
    result = await ctx.executor.run(spec, prompt, seed=item_seed,
                                    vote_key=lambda text: task.extract(text, item),
                                    task_id=str(item.id), shared_budget=ctx.eval_budget,
                                    orchestrator=orch_info)
    if result.status == "budget_exceeded" and result.budget_scope == "eval":
        raise EvalBudgetSpent(result.stop_reason)
    prediction = task.extract(result.answer, item) if result.answer else None
    correct = await _check(ctx, prediction, item) if prediction is not None else False
    latency = time.perf_counter() - start
    result.trace.rewards = {"correct": float(correct)}
    trace_id = getattr(result.trace, "trace_id", None)
    tokens = {str(k): v for k, v in dict(result.tokens_by_agent).items()}
    return ItemRow(item_id=str(item.id), seed=seed, prediction=prediction, gold=_gold(item), correct=correct,
                   tokens=tokens, total_tokens=int(result.total_tokens), latency_s=latency, trace_id=trace_id,
                   status=str(result.status), stop_reason=getattr(result, "stop_reason", None),
                   orchestrator_tokens=orch_tokens, trace_json=_compact_json(result.trace.to_json()))


async def _propose(ctx: ItemContext, prompt: str, seed: int) -> Any:
    """The orchestrator's proposal, its worst case reserved first on the evaluation's cap (if any)."""
    ledger = ctx.eval_budget
    if ledger is None:
        return await ctx.orchestrator.propose(prompt, seed=seed)
    bound = orchestrator_token_bound(ctx.orchestrator, prompt)
    held = await ledger.reserve(bound, bound, what="the orchestrator")
    spent = held  # failed or cut off: it may have been billed
    try:
        proposal = await ctx.orchestrator.propose(prompt, seed=seed)
        spent = int(proposal.tokens)
        return proposal
    finally:
        ledger.settle(held, spent)


def orchestrator_token_bound(orchestrator: Any, prompt: str) -> int:
    """The most tokens one proposal can cost: a bound on its prompt plus its generation limit."""
    if not getattr(orchestrator, "writes_with_model", True):  # the template orchestrator: no model call
        return 0
    if hasattr(orchestrator, "messages"):  # the prompted orchestrator
        return prompt_token_bound(orchestrator.messages(prompt)) + int(orchestrator.max_tokens)
    from lemon.orchestrator.policy_prompt import policy_messages

    messages = policy_messages(prompt, orchestrator.roles, orchestrator.levels)
    return (prompt_token_bound([Message(m["role"], m["content"]) for m in messages])  # type: ignore[arg-type]
            + int(orchestrator.max_new_tokens))


def _error_row(item: Any, seed: int, reason: str, latency_s: float) -> ItemRow:
    """The row of an item that failed before its spec ran (nothing to score, no trace)."""
    return ItemRow(item_id=str(item.id), seed=seed, prediction=None, gold=_gold(item), correct=False, tokens={},
                   total_tokens=0, latency_s=latency_s, trace_id=None, status="error", stop_reason=reason)


def proposal_info(proposal: Any) -> dict[str, Any]:
    """What the trace keeps of how the spec was written: the orchestrator's raw output, repairs, tokens."""
    return {"source": proposal.source, "raw": proposal.raw, "warnings": list(proposal.warnings),
            "prompt_tokens": proposal.prompt_tokens, "completion_tokens": proposal.completion_tokens,
            "tokens": proposal.tokens, **{k: v for k, v in proposal.extra.items() if k != "raw"}}


def _compact_json(data: Any) -> str:
    # Compact on purpose: `indent` switches json to its pure-Python encoder, ~10x slower.
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


def _gold(item: Any) -> str | None:
    ans = getattr(item, "answer", None)
    if ans is None:
        return None
    text = str(ans)
    return text if len(text) <= 2000 else text[:2000] + "..."


# ---- the driver -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalSummary:
    """What one `evaluate` call did and the run's totals over the requested items and seeds."""

    run_id: str
    store_path: Path
    benchmark: str
    split: str
    method: str
    pool: str
    level: str
    n_items: int
    seeds: int
    computed: int          # (item, seed) pairs computed by this call
    skipped: int           # already in the store (resumed)
    stats: RunStats
    in_error: int = 0      # requested pairs whose stored status is `error` (this call's and earlier ones)
    not_computed: int = 0  # pairs left out because --budget-tokens-total was used up
    budget_tokens_total: int | None = None
    eval_tokens: int | None = None  # tokens charged to that cap (stored rows' tokens included)
    top_error: str | None = None    # the most common stop_reason of the rows in error


class _Tracker:
    """Running accuracy and tokens/item for the progress bar, plus the fail-fast rule on errors."""

    def __init__(self, rows: Sequence[ItemRow]) -> None:
        self.n = len(rows)
        self.correct = sum(r.correct for r in rows)
        self.tokens = sum(r.total_tokens for r in rows)
        self.new: list[ItemRow] = []

    def add(self, row: ItemRow) -> None:
        self.n += 1
        self.correct += row.correct
        self.tokens += row.total_tokens
        self.new.append(row)
        if len(self.new) == FAIL_FAST_ERRORS and all(r.status == "error" for r in self.new):
            raise LemonError(f"the first {FAIL_FAST_ERRORS} items all ended in error ({row.stop_reason}); "
                             "fix the setup, then re-run the same command with --retry-errors")

    def describe(self) -> str:
        if not self.n:
            return "acc -  tok/item -"
        return f"acc {100 * self.correct / self.n:5.1f}%  tok/item {self.tokens / self.n:,.0f}"


def default_split(benchmark: str) -> str:
    """The benchmark's evaluation split, as `lemon.bench.splits` defines it (the paper's evaluation sets)."""
    from lemon.bench import splits

    get_task(benchmark)
    default = getattr(splits, "default_split", None)
    if callable(default):
        return str(default(benchmark))
    return str(splits.DEFAULT_SPLITS[benchmark])  # type: ignore[attr-defined]


def _resolve_split(benchmark: str, split: str | None) -> str:
    return split if split is not None else default_split(benchmark)


async def evaluate(
    benchmark: str,
    method: str,
    *,
    split: str | None = None,
    limit: int | None = None,
    seeds: int = 1,
    pool: str = "cpu",
    level: str = "medium",
    concurrency: int = 4,
    store: ResultsStore | str | Path | None = None,
    data_dir: str | Path | None = None,
    temperature: float = DEFAULT_TEMPERATURE,
    max_tokens: int | None = None,
    n_agents: int | None = None,
    budget_tokens: int | None = None,
    call_timeout_s: float | None = None,
    budget_tokens_total: int | None = None,
    cache: bool = True,
    retry_errors: bool = False,
    progress: bool = True,
    console: Console | None = None,
    ray_address: str | None = None,
    pool_factory: PoolFactory | None = None,
    shard: tuple[int, int] | None = None,
) -> EvalSummary:
    """Evaluate `method` on the first `limit` items of `benchmark`'s `split` for seeds 0..seeds-1.

    Results go to `store` (default `LEMON_HOME/results.sqlite`) one row per (item, seed) as each finishes;
    pairs already stored are skipped. `pool_factory` replaces `load_pool(pool)` (tests; `pool` still names
    the run). `ray_address` runs each (item, seed) as a Ray task (see `scale.py`). `shard=(i, n)` computes only
    every n-th (item, seed) pair starting at i, so n processes (one model each, e.g. on one GPU) can fill ONE run of
    one store together; the store's per-pair rows keep the union exact. `budget_tokens_total` caps the tokens of
    the whole run (see the module docstring).
    """
    from lemon.bench.datasets import load_split

    task = get_task(benchmark)
    check_method(method)
    _check_options(seeds=seeds, concurrency=concurrency, limit=limit, shard=shard, temperature=temperature,
                   max_tokens=max_tokens, budget_tokens=budget_tokens, call_timeout_s=call_timeout_s,
                   budget_tokens_total=budget_tokens_total, ray_address=ray_address)
    split = _resolve_split(benchmark, split)
    items = list(load_split(benchmark, split, data_dir=data_dir))
    if limit is not None:
        items = items[:limit]
    if not items:
        raise LemonError(f"{benchmark}/{split} has no items in {data_dir or 'the data directory'}")
    if len({str(i.id) for i in items}) != len(items):
        raise LemonError(f"{benchmark}/{split}: item ids are not unique; the data files are corrupt")

    own_store = not isinstance(store, ResultsStore)
    db = store if isinstance(store, ResultsStore) else ResultsStore(store)
    owner = new_claim_owner()  # another process on this store skips what this one claimed, and vice versa
    try:
        settings = EvalSettings(benchmark=benchmark, method=method, level=level, pool=pool,
                                temperature=temperature, max_tokens=max_tokens, n_agents=n_agents,
                                budget_tokens=budget_tokens, call_timeout_s=call_timeout_s, cache=cache)
        identity = settings.identity()
        run_id = make_run_id(benchmark=benchmark, split=split, method=method, pool=pool_identity(pool),
                             level=level, limit=limit, config=identity)
        ids_hash = hashlib.sha256("\n".join(str(i.id) for i in items).encode()).hexdigest()
        config = {**identity, "kind": task.kind, "limit": limit,
                  "pool_identity": pool_identity(pool), "item_ids_sha256": ids_hash,
                  "lemon_version": _lemon_version()}
        if budget_tokens_total is not None:  # recorded, not identity: it never changes an item's result
            config["budget_tokens_total"] = budget_tokens_total
        db.ensure_run(run_id, benchmark=benchmark, split=split, method=method, pool=pool, level=level,
                      seeds=seeds, n_items=len(items), config=config)
        if retry_errors:
            dropped = db.delete_errors(run_id)
            if dropped:
                log.info("retrying %d items that ended in error", dropped)
        by_id = {str(i.id): i for i in items}
        keys = [(str(i.id), s) for s in range(seeds) for i in items]
        todo = keys if shard is None else keys[shard[0]::shard[1]]  # by position in the full list: disjoint
        pending = db.pending_items(run_id, todo)
        skipped = len(todo) - len(pending)
        if skipped:
            log.info("run %s: resuming, %d of %d (item, seed) pairs stored", run_id, skipped, len(todo))
        stored = db.items(run_id, item_ids=list(by_id), seeds=range(seeds))
        tracker = _Tracker(stored)
        eval_budget = None if budget_tokens_total is None else TokenLedger(
            budget_tokens_total, "eval", used=sum(r.total_tokens + r.orchestrator_tokens for r in stored))
        jobs = [(by_id[i], s) for i, s in pending]
        not_computed = 0
        bar = _progress(console, progress)
        with bar:
            bar_task = bar.add_task(f"{benchmark}/{split} {method}", total=len(todo), completed=skipped,
                                    stats=tracker.describe())

            def record(row: ItemRow) -> None:
                db.put(run_id, row)
                tracker.add(row)
                bar.update(bar_task, advance=1, stats=tracker.describe())

            try:
                if ray_address:
                    from lemon.bench.scale import run_with_ray

                    await run_with_ray(ray_address, settings, jobs, record, concurrency=concurrency,
                                       pool_factory=pool_factory)
                else:
                    not_computed = await _run_local(
                        settings, jobs, record, concurrency=concurrency, pool_factory=pool_factory,
                        eval_budget=eval_budget, claim=lambda item_id, seed: db.claim(run_id, item_id, seed, owner))
            except LemonError as exc:
                raise type(exc)(f"{exc} [{tracker.n} of {len(keys)} results are stored in {db.path}; "
                                "re-run the same command to resume]") from exc
        rows = db.items(run_id, item_ids=list(by_id), seeds=range(seeds))
        info = db.run(run_id)
        assert info is not None
        return EvalSummary(run_id=run_id, store_path=db.path, benchmark=benchmark, split=split, method=method,
                           pool=pool, level=level, n_items=len(items), seeds=seeds, computed=len(tracker.new),
                           skipped=skipped, stats=run_stats(info, rows),
                           in_error=sum(r.status == "error" for r in rows), not_computed=not_computed,
                           budget_tokens_total=budget_tokens_total,
                           eval_tokens=None if eval_budget is None else eval_budget.used,
                           top_error=_top_error(rows))
    finally:
        with contextlib.suppress(LemonError):
            db.release_claims(owner)
        if own_store:
            db.close()


async def _run_local(settings: EvalSettings, jobs: Sequence[tuple[Any, int]],
                     record: Callable[[ItemRow], None], *, concurrency: int,
                     pool_factory: PoolFactory | None, eval_budget: TokenLedger | None = None,
                     claim: Callable[[str, int], bool] | None = None) -> int:
    """All jobs in this process, at most `concurrency` in flight; each row is recorded as it finishes.
    Returns how many jobs were left out because `eval_budget` ran out (none is started after that). With
    `claim`, a job another process on the same store has claimed (or stored) is skipped."""
    if not jobs:
        return 0
    ctx = build_context(settings, pool_factory)
    ctx.eval_budget = eval_budget
    sem = asyncio.Semaphore(concurrency)
    left_out = 0

    async def one(item: Any, seed: int) -> None:
        nonlocal left_out
        async with sem:
            if eval_budget is not None and eval_budget.refused:
                left_out += 1
                return
            if claim is not None and not claim(str(item.id), seed):
                return  # stored meanwhile, or being computed by another process on this store
            try:
                row = await run_item(ctx, item, seed)
            except EvalBudgetSpent as exc:
                log.info("%s seed %d not computed: %s", item.id, seed, exc)
                left_out += 1
                return
        record(row)  # on the event loop thread: the store sees one writer

    try:
        async with asyncio.TaskGroup() as tg:
            for item, seed in jobs:
                tg.create_task(one(item, seed))
    except BaseExceptionGroup as group:
        raise _first_error(group) from None
    finally:
        await ctx.aclose()
    return left_out


def _check_options(*, seeds: int, concurrency: int, limit: int | None, shard: tuple[int, int] | None,
                   temperature: float, max_tokens: int | None, budget_tokens: int | None,
                   call_timeout_s: float | None, budget_tokens_total: int | None, ray_address: str | None) -> None:
    """One-line usage errors for option values that would otherwise mean something else (0 = unlimited)."""
    if seeds < 1 or concurrency < 1 or (limit is not None and limit < 1):
        raise LemonError("--seeds, --concurrency and --limit must be at least 1")
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise LemonError(f"--shard must be I/N with 0 <= I < N, got {shard[0]}/{shard[1]}")
    if not 0.0 <= temperature <= 2.0:
        raise LemonError(f"--temperature must be in [0, 2], got {temperature}")
    check_positive_int("--max-tokens", max_tokens)
    check_positive_int("--budget-tokens", budget_tokens)
    check_positive_int("--budget-tokens-total", budget_tokens_total)
    check_timeout("--timeout", call_timeout_s)
    if budget_tokens_total is not None and (ray_address or shard is not None):
        # Each process would count against its own copy of the cap.
        raise LemonError("--budget-tokens-total caps one process's evaluation; it cannot be combined with "
                         "--ray or --shard")


def _first_error(group: BaseExceptionGroup) -> BaseException:
    """A user-facing LemonError if any task raised one, else the first exception (a bug: keep it)."""
    flat: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        e = stack.pop(0)
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
        else:
            flat.append(e)
    for e in flat:
        if isinstance(e, LemonError):
            return e
    return flat[0]


def _progress(console: Console | None, enabled: bool) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console or Console(stderr=True),
        disable=not enabled,
        transient=False,
    )


def _lemon_version() -> str:
    from lemon import __version__  # not importlib.metadata: that scans sys.path, ~2 ms per evaluation

    return __version__


def _top_error(rows: Sequence[ItemRow]) -> str | None:
    reasons = Counter(r.stop_reason or "no reason recorded" for r in rows if r.status == "error")
    if not reasons:
        return None
    reason, n = reasons.most_common(1)[0]
    one = " ".join(reason.split())
    return f"{one[:300]}{'…' if len(one) > 300 else ''} ({n}x)"


def exit_status(summary: EvalSummary) -> int:
    """`lemon eval`'s exit code: 3 if items ended in error, else 4 if the token cap left items out, else 0."""
    if summary.in_error:
        return EXIT_ITEMS_IN_ERROR
    if summary.not_computed:
        return EXIT_BUDGET_SPENT
    return 0


def summary_lines(summary: EvalSummary) -> list[str]:
    """Human-readable lines for the CLI (rich markup)."""
    st = summary.stats
    std = "n/a (one seed)" if st.accuracy_std is None else f"{100 * st.accuracy_std:.2f}"
    acc = "n/a" if math.isnan(st.accuracy_mean) else f"{100 * st.accuracy_mean:.2f}%"
    per_seed = ", ".join(f"seed {s}: {100 * a:.2f}%" for s, a in st.per_seed_accuracy.items())
    return [
        f"[bold]{summary.benchmark}[/] split [bold]{summary.split}[/] (first {summary.n_items} items), "
        f"method [bold]{summary.method}[/], pool {summary.pool}, level {summary.level}",
        f"accuracy {acc} ± {std} over {len(st.seeds)} seed(s) ({per_seed})",
        f"worker tokens per item {st.tokens_mean:,.1f}; items not ok: {st.errors}",
        f"computed {summary.computed}, resumed {summary.skipped}; run {summary.run_id} "
        f"in {summary.store_path}",
        f"traces: in the store; show one with `lemon trace {summary.run_id} ITEM_ID --store {summary.store_path}`",
        *_problem_lines(summary),
    ]


def _problem_lines(summary: EvalSummary) -> list[str]:
    lines = []
    if summary.budget_tokens_total is not None:
        lines.append(f"tokens charged to --budget-tokens-total: {summary.eval_tokens:,} of "
                     f"{summary.budget_tokens_total:,}")
    if summary.in_error:
        lines.append(f"[bold red]{summary.in_error} of {summary.n_items * summary.seeds} (item, seed) pairs ended "
                     f"in error[/] (exit status {EXIT_ITEMS_IN_ERROR}); fix the cause, then re-run with "
                     "--retry-errors")
        lines.append(f"most common error: {escape(summary.top_error or '')}")
    if summary.not_computed:
        lines.append(f"[bold yellow]{summary.not_computed} (item, seed) pairs not computed[/]: --budget-tokens-total "
                     f"is used up (exit status {EXIT_BUDGET_SPENT}); re-run with a larger one to continue")
    return lines
