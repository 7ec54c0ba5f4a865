"""Evaluate a method on a benchmark split: bounded-concurrency async runs, each result stored as it finishes.

One evaluation = one run in the results store (see `store.py`): the first `limit` items of the split in its
fixed order, times seeds 0..seeds-1. Re-running the same command resumes; only missing (item, seed) pairs
are computed. A run is named by the `limit` it was created with, and a later `--limit` of the same settings
finds it again (`_find_run_id`): the first N items are a prefix of the first M, so a larger limit ADDS items to
the stored run and a smaller one reads a part of it, instead of starting over. Every method is a spec on the
same runtime (`Executor`) and pool (`methods.py`); the unit of work, one (item, seed), is `item.run_item`,
which this local driver and the Ray driver (`scale.py`) share.

`evaluate(settings, plan, store=..., execution=..., on_progress=...)` takes what is evaluated (`EvalSettings`,
the run's identity), which pairs (`EvalPlan`) and how they are computed (`Execution`: concurrency, Ray,
shards, the run's token cap; none of it changes a result). Progress is reported through `on_progress`, so
the library draws nothing; the CLI turns it into a progress bar.

Exit status of `lemon eval` (`exit_status`): 0 when every requested item has a result and none ended in error;
3 (`EXIT_ITEMS_IN_ERROR`) when some items of the run ended in error (an endpoint or model failed on them: they
are counted and shown, the others are scored); 4 (`EXIT_BUDGET_SPENT`) when `--budget-tokens-total` ran out
before every item was computed. 2 stays the code of bad input and broken setups (`LemonError`).

`--budget-tokens-total` caps the tokens of a whole run (workers and orchestrator, items stored by earlier
invocations included). It never clips a call: a call it cannot pay for in full is refused, and the item it
belonged to is not stored (it would be a result of the cap, not of the method), so the cap decides HOW MANY
items are computed, never what an item scores; that is why it is not part of the run id and a larger cap
resumes the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from lemon.benchmarks.base import Item
from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.errors import LemonError
from lemon.evaluation.item import (
    EvalBudgetSpent,
    EvalSettings,
    PoolFactory,
    build_context,
    pool_identity,
    run_item,
)
from lemon.evaluation.report import RunStats, run_stats
from lemon.evaluation.scale import run_with_ray
from lemon.evaluation.store import ItemRow, ResultsStore, RunDeleted, make_run_id, new_claim_owner, run_deleted
from lemon.evaluation.table import specs_note
from lemon.runtime.budget import TokenLedger, check_positive_int, check_timeout
from lemon.seeds import MAX_SEED, MAX_SEEDS

log = logging.getLogger(__name__)

# Abort when this many first results of an invocation ALL end in `error`: that is a broken setup
# (unreachable endpoint, missing model), not a method that is wrong, and should not fill the store.
FAIL_FAST_ERRORS = 8
EXIT_ITEMS_IN_ERROR = 3
EXIT_BUDGET_SPENT = 4


@dataclass(frozen=True)
class EvalPlan:
    """Which (item, seed) pairs: the first `limit` items of `split` (None: the evaluation split), seeds
    first_seed..first_seed+seeds-1 (`lemon eval --seed S`: one replicate, S), read from `data_dir` (None:
    LEMON_DATA_DIR)."""

    split: str | None = None
    limit: int | None = None
    seeds: int = 1
    data_dir: str | Path | None = None
    first_seed: int = 0

    @property
    def seed_range(self) -> range:
        return range(self.first_seed, self.first_seed + self.seeds)


@dataclass(frozen=True)
class Execution:
    """How the pairs are computed; none of it changes a result, so none of it is in the run id.

    `ray_address` runs each pair as a Ray task (`scale.py`). `shard=(i, n)` computes only every n-th pair
    starting at i, so n processes can fill ONE run of one store together. `budget_tokens_total` caps the
    tokens of the whole run (see the module docstring). `pool_factory` replaces `load_pool(settings.pool)`
    (tests; `settings.pool` still names the run).
    """

    concurrency: int = 4
    ray_address: str | None = None
    shard: tuple[int, int] | None = None
    budget_tokens_total: int | None = None
    retry_errors: bool = False
    pool_factory: PoolFactory | None = None


@dataclass(frozen=True)
class EvalProgress:
    """Where an evaluation stands: reported once before the first pair, then after each stored row."""

    label: str  # e.g. "multiarith/test cot"
    done: int  # pairs with a result (resumed ones included)
    total: int  # pairs this invocation is responsible for
    stats: str  # running accuracy and tokens per item
    row: ItemRow | None = None  # the row just stored (None for the first report)


OnProgress = Callable[[EvalProgress], None]


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
    """The benchmark's evaluation split, as its file defines it (the paper's evaluation sets)."""
    return get_benchmark(benchmark).default_split  # an unknown benchmark: the message lists the valid ones


def run_id_of(settings: EvalSettings, split: str, limit: int | None,
              identity: dict[str, object] | None = None) -> str:
    """The id of the run `settings` evaluate on the first `limit` items of `split` (see `store.make_run_id`).

    Stored runs are found again by it, so every field and value here is part of the store's format."""
    return make_run_id(benchmark=settings.benchmark, split=split, method=settings.method.name,
                       pool=pool_identity(settings.pool), level=settings.level, limit=limit,
                       config=settings.identity() if identity is None else identity)


async def evaluate(settings: EvalSettings, plan: EvalPlan, *, store: ResultsStore | str | Path | None = None,
                   execution: Execution | None = None, on_progress: OnProgress | None = None) -> EvalSummary:
    """Evaluate `settings.method` on the pairs of `plan`; each row is stored as it finishes.

    Results go to `store` (default `LEMON_HOME/results.sqlite`) one row per (item, seed); pairs already stored
    are skipped. `on_progress` is called before the first pair and after every stored row.
    """
    execution = execution or Execution()
    _check_options(settings, plan, execution)
    split = plan.split if plan.split is not None else default_split(settings.benchmark)
    items = _load_items(settings.benchmark, split, plan)
    own_store = not isinstance(store, ResultsStore)
    db = store if isinstance(store, ResultsStore) else ResultsStore(store)
    owner = new_claim_owner()  # another process on this store skips what this one claimed, and vice versa
    try:
        run = _open_run(db, settings, plan, execution, split, items)
        await _compute(db, run, execution, owner, on_progress)
        return _summary(db, run, execution)
    finally:
        with contextlib.suppress(LemonError):
            db.release_claims(owner)
        if own_store:
            db.close()


def _load_items(benchmark: str, split: str, plan: EvalPlan) -> list[Item]:
    """The first `plan.limit` items of the split, in its fixed order, with unique ids."""
    items = list(load_split(benchmark, split, data_dir=plan.data_dir))
    if plan.limit is not None:
        items = items[:plan.limit]
    if not items:
        raise LemonError(f"{benchmark}/{split} has no items in {plan.data_dir or 'the data directory'}")
    if len({str(i.id) for i in items}) != len(items):
        raise LemonError(f"{benchmark}/{split}: item ids are not unique; the data files are corrupt")
    return items


@dataclass
class _Run:
    """One invocation's view of its run: the id, the requested pairs, what is left, and the running totals."""

    settings: EvalSettings
    run_id: str
    split: str
    items: list[Item]
    seeds: range
    todo: list[tuple[str, int]]  # the pairs this invocation is responsible for (its shard)
    jobs: list[tuple[Item, int]]  # those of them not stored yet
    tracker: _Tracker
    eval_budget: TokenLedger | None = None
    not_computed: int = 0

    @property
    def skipped(self) -> int:
        return len(self.todo) - len(self.jobs)

    @property
    def label(self) -> str:
        return f"{self.settings.benchmark}/{self.split} {self.settings.method.name}"


def _find_run_id(db: ResultsStore, settings: EvalSettings, split: str, limit: int | None,
                 identity: dict[str, object]) -> str:
    """The id of the stored run these settings continue: the one of `limit`, else the largest stored run of the
    same settings created with another limit (its id is recomputed from its own recorded limit, so only a run
    of exactly these settings matches), else a new one named by `limit`."""
    own = run_id_of(settings, split, limit, identity)
    if db.run(own) is not None:
        return own
    siblings = [r for r in db.runs() if (r.benchmark, r.split, r.method, r.level) ==
                (settings.benchmark, split, settings.method.name, settings.level)
                and "limit" in r.config and r.run_id == run_id_of(settings, split, r.limit, identity)]
    if not siblings:
        return own
    widest = max(siblings, key=lambda r: (r.config["limit"] is None, r.n_items, db.count(r.run_id)))
    log.info("run %s: continuing it with --limit %s (it was created with --limit %s)", widest.run_id,
             limit, widest.config["limit"])
    return widest.run_id


def workers_reply_limit(settings: EvalSettings) -> int | None:
    """The tokens a worker reply may have: `--max-tokens`, else the pool's default (a built-in pool or a pool
    file; None for a pool known only to its factory). Recorded in the run's config, not its identity (None
    there means "the pool's default"), so the report counts cut replies of a pool file's runs too."""
    from lemon.llm.pools import BUILTIN, read_pool_config

    if settings.max_tokens is not None:
        return settings.max_tokens
    if settings.pool in BUILTIN or Path(settings.pool).expanduser().is_file():
        return read_pool_config(settings.pool).defaults.max_tokens
    return None


def _open_run(db: ResultsStore, settings: EvalSettings, plan: EvalPlan, execution: Execution, split: str,
              items: list[Item]) -> _Run:
    """Create or resume the run in the store and list what is left to compute."""
    identity = settings.identity()
    run_id = _find_run_id(db, settings, split, plan.limit, identity)
    ids_hash = hashlib.sha256("\n".join(str(i.id) for i in items).encode()).hexdigest()
    config = {**identity, "kind": get_benchmark(settings.benchmark).kind, "limit": plan.limit,
              "pool_identity": pool_identity(settings.pool), "item_ids_sha256": ids_hash,
              "lemon_version": _lemon_version(), "reply_limit": workers_reply_limit(settings)}
    if execution.budget_tokens_total is not None:  # recorded, not identity: it never changes an item's result
        config["budget_tokens_total"] = execution.budget_tokens_total
    db.ensure_run(run_id, benchmark=settings.benchmark, split=split, method=settings.method.name,
                  pool=settings.pool, level=settings.level, seeds=plan.seed_range, n_items=len(items),
                  config=config)
    if execution.retry_errors:
        dropped = db.delete_errors(run_id)
        if dropped:
            log.info("retrying %d items that ended in error", dropped)
    by_id = {str(i.id): i for i in items}
    keys = [(str(i.id), s) for s in plan.seed_range for i in items]
    shard = execution.shard
    todo = keys if shard is None else keys[shard[0]::shard[1]]  # by position in the full list: disjoint
    pending = db.pending_items(run_id, todo)
    if len(todo) > len(pending):
        log.info("run %s: resuming, %d of %d (item, seed) pairs stored", run_id, len(todo) - len(pending), len(todo))
    stored = db.items(run_id, item_ids=list(by_id), seeds=plan.seed_range)
    cap = execution.budget_tokens_total
    budget = None if cap is None else TokenLedger(cap, "eval",
                                                  used=sum(r.total_tokens + r.orchestrator_tokens for r in stored))
    return _Run(settings=settings, run_id=run_id, split=split, items=items, seeds=plan.seed_range, todo=todo,
                jobs=[(by_id[i], s) for i, s in pending], tracker=_Tracker(stored), eval_budget=budget)


async def _compute(db: ResultsStore, run: _Run, execution: Execution, owner: str,
                   on_progress: OnProgress | None) -> None:
    """Compute the run's jobs locally or on Ray, storing and reporting each row as it arrives."""
    done = run.skipped

    def report(row: ItemRow | None) -> None:
        if on_progress is not None:
            on_progress(EvalProgress(run.label, done, len(run.todo), run.tracker.describe(), row))

    def record(row: ItemRow) -> None:
        nonlocal done
        db.put(run.run_id, row)
        run.tracker.add(row)
        done += 1
        report(row)

    report(None)
    try:
        if execution.ray_address:
            await run_with_ray(execution.ray_address, run.settings, run.jobs, record,
                               concurrency=execution.concurrency, pool_factory=execution.pool_factory)
        else:
            run.not_computed = await _run_local(
                run.settings, run.jobs, record, concurrency=execution.concurrency,
                pool_factory=execution.pool_factory, eval_budget=run.eval_budget,
                claim=lambda item_id, seed: db.claim(run.run_id, item_id, seed, owner))
    except RunDeleted:
        raise  # nothing to resume: the run is gone (its one line says so)
    except LemonError as exc:
        raise type(exc)(f"{exc} [{run.tracker.n} of {len(run.items) * len(run.seeds)} results are stored in {db.path}; "
                        "re-run the same command to resume]") from exc


def _summary(db: ResultsStore, run: _Run, execution: Execution) -> EvalSummary:
    rows = db.items(run.run_id, item_ids=[str(i.id) for i in run.items], seeds=run.seeds)
    info = db.run(run.run_id)
    if info is None:  # deleted after the last result was stored
        raise run_deleted(run.run_id, db.path)
    s = run.settings
    return EvalSummary(run_id=run.run_id, store_path=db.path, benchmark=s.benchmark, split=run.split,
                       method=s.method.name, pool=s.pool, level=s.level, n_items=len(run.items), seeds=len(run.seeds),
                       computed=len(run.tracker.new), skipped=run.skipped,
                       stats=run_stats(info, rows, db.spec_sources(run.run_id)),
                       in_error=sum(r.status == "error" for r in rows), not_computed=run.not_computed,
                       budget_tokens_total=execution.budget_tokens_total,
                       eval_tokens=None if run.eval_budget is None else run.eval_budget.used,
                       top_error=_top_error(rows))


async def _run_local(settings: EvalSettings, jobs: Sequence[tuple[Item, int]],
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

    async def one(item: Item, seed: int) -> None:
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


def _check_options(settings: EvalSettings, plan: EvalPlan, execution: Execution) -> None:
    """One-line usage errors for option values that would otherwise mean something else (0 = unlimited)."""
    get_benchmark(settings.benchmark)
    if plan.seeds < 1 or execution.concurrency < 1 or (plan.limit is not None and plan.limit < 1):
        raise LemonError("--seeds, --concurrency and --limit must be at least 1")
    if plan.first_seed < 0:
        raise LemonError(f"--seed must be 0 or more (a replicate's number), got {plan.first_seed}")
    if plan.seeds > MAX_SEEDS or plan.first_seed + plan.seeds - 1 > MAX_SEED:
        raise LemonError(f"--seed {plan.first_seed} with --seeds {plan.seeds} asks for seeds up to "
                         f"{plan.first_seed + plan.seeds - 1}; at most {MAX_SEEDS} seeds, none above {MAX_SEED}")
    shard = execution.shard
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise LemonError(f"--shard must be I/N with 0 <= I < N, got {shard[0]}/{shard[1]}")
    if not 0.0 <= settings.temperature <= 2.0:
        raise LemonError(f"--temperature must be in [0, 2], got {settings.temperature}")
    check_positive_int("--max-tokens", settings.max_tokens)
    check_positive_int("--budget-tokens", settings.budget_tokens)
    check_positive_int("--budget-tokens-total", execution.budget_tokens_total)
    check_timeout("--timeout", settings.call_timeout_s)
    if execution.budget_tokens_total is not None and (execution.ray_address or shard is not None):
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
    if note := specs_note(summary.stats.spec_sources):
        lines.append(f"[bold yellow]{note}[/]: the cell measures those specs too; each trace keeps the "
                     "orchestrator's raw output (`lemon trace`)")
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
