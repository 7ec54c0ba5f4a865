"""Read a run's trace back, and explain a run: `lemon trace` / `lemon explain`'s use cases for scripts.

Why here: a trace was read back as a plain dict by each reader, and the explanation of a run lived in the CLI
(`cli/view_cmds.py`), with the spec-file case on the pool file's greedy settings and whole-text votes where
`lemon exec` sampled and voted on answers. Both are one call now, with `lemon.run`'s defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lemon.api.session import opened, sync
from lemon.api.spec import PoolRef, Spec
from lemon.errors import LemonError
from lemon.evaluation.store import default_store_path
from lemon.inspection.explain import Attribution, EditOutcome, explain_spec, explain_stored, plan_stored, plan_trace
from lemon.inspection.itemview import resolve_item
from lemon.inspection.tracefile import find_trace, looks_like_trace, open_source
from lemon.inspection.tracefile import read_trace as read_trace_file
from lemon.llm.defaults import DEFAULT_MAX_TOKENS, DEFAULT_POOL, DEFAULT_TEMPERATURE
from lemon.llm.pools import load_pool
from lemon.runtime.budget import check_positive_int
from lemon.runtime.trace import Trace

OnPlan = Callable[[Attribution], None]
OnEdit = Callable[[EditOutcome], None]


def read_trace(trace: str | Path) -> Trace:
    """The trace a run saved, typed (`lemon.runtime.trace.Trace`: `events`, `edges`, `contents` (each agent's
    reply), `prompts` (each agent's messages), `topology` (the spec), `costs`, `metrics`, `system` (the pool,
    seed and sampling settings), `task`). `trace` is the file's path or its id (`Result.trace.trace_id`, or a
    unique prefix of 4+ characters) in LEMON_HOME/runs. A trace of an older format comes back upgraded; a missing
    or foreign file, or a trace newer than this LEMON reads, is one `LemonError` line."""
    path = Path(trace).expanduser() if Path(trace).expanduser().is_file() else find_trace(str(trace))
    if path is None:
        raise LemonError(f"no trace {str(trace)!r}: neither a trace file nor the id of one in LEMON_HOME/runs; pass "
                         "the path or id `lemon run` printed (`Result.trace_path`)")
    return read_trace_file(path)


def explain(target: str | Path | Spec, item: str | None = None, *, seed: int = 0, store: str | Path | None = None,
            data_dir: str | Path | None = None, gold: str | None = None, pool: PoolRef = DEFAULT_POOL,
            max_tokens: int = DEFAULT_MAX_TOKENS, max_edits: int | None = None, budget_tokens: int | None = None,
            cache: bool = True, on_plan: OnPlan | None = None, on_edit: OnEdit | None = None) -> Attribution:
    """Counterfactual attribution: re-run every applicable single-field edit of a run's spec (an edge
    deleted, a duty reverted, a capacity lowered, a stop rule changed) and measure how each changes the
    answer, its correctness and its tokens. What `lemon explain` does.

    `target` is a stored run: a run id (or unique prefix) of `store` (default LEMON_HOME/results.sqlite) with
    `item` its item id (the benchmark's item is read from `data_dir`), or a trace of `lemon.run` (its path or
    id; `gold` grades it). The run's own pool and settings are used, and the attribution is stored with the run.
    Or `target` is a spec (a `lemon.Spec` or a spec file) and `item` the task text: the spec runs on `pool` (a
    name, a pool file or a `Pool`) as `lemon.execute` runs it (temperature 0.7, `max_tokens` replies, votes on
    the answers of the task's kind), then each edit; `gold` grades the answers.

    `max_edits` and `budget_tokens` (the edits' estimated worker tokens) bound the work. `on_plan` gets the
    planned attribution before any edit runs (`Attribution.estimate()`), `on_edit` each edit as it ends.
    Returns the `Attribution` (`edits`: one `EditOutcome` per field, with its delta and tokens; `to_json()`).
    """
    return sync(aexplain(target, item, seed=seed, store=store, data_dir=data_dir, gold=gold, pool=pool,
                         max_tokens=max_tokens, max_edits=max_edits, budget_tokens=budget_tokens, cache=cache,
                         on_plan=on_plan, on_edit=on_edit))


async def aexplain(target: str | Path | Spec, item: str | None = None, *, seed: int = 0,
                   store: str | Path | None = None, data_dir: str | Path | None = None, gold: str | None = None,
                   pool: PoolRef = DEFAULT_POOL, max_tokens: int = DEFAULT_MAX_TOKENS, max_edits: int | None = None,
                   budget_tokens: int | None = None, cache: bool = True, on_plan: OnPlan | None = None,
                   on_edit: OnEdit | None = None) -> Attribution:
    """`explain`, awaited (the same arguments, the same attribution)."""
    check_positive_int("max_tokens", max_tokens)
    if isinstance(target, Spec) or _is_spec_file(target):
        if item is None:
            named = "" if isinstance(target, Spec) else f" {target}"
            raise LemonError(f"explaining the spec{named} needs the task text: lemon explain SPEC \"TASK\"")
        return await _explain_spec(target, item, pool=pool, seed=seed, gold=gold, max_tokens=max_tokens,
                                   bounds=(max_edits, budget_tokens), cache=cache, hooks=(on_plan, on_edit))
    return await _explain_stored(str(target), item, seed=seed, store=Path(store) if store else default_store_path(),
                                 data_dir=data_dir, gold=gold, bounds=(max_edits, budget_tokens), cache=cache,
                                 hooks=(on_plan, on_edit))


def _is_spec_file(target: str | Path) -> bool:
    path = Path(target)
    return path.is_file() and not looks_like_trace(path)


async def _explain_spec(spec: str | Path | Spec, task: str, *, pool: PoolRef, seed: int, gold: str | None,
                        max_tokens: int, bounds: tuple[int | None, int | None], cache: bool,
                        hooks: tuple[OnPlan | None, OnEdit | None]) -> Attribution:
    checked = spec.checked(pool) if isinstance(spec, Spec) else Spec.read(spec, pool=pool)
    async with opened(pool, cache) as the_pool:
        params = the_pool.params(temperature=DEFAULT_TEMPERATURE, max_tokens=max_tokens)
        return await explain_spec(checked, task, the_pool, seed=seed, params=params, gold=gold, max_edits=bounds[0],
                                  budget_tokens=bounds[1], on_plan=hooks[0], on_edit=hooks[1])


async def _explain_stored(target: str, item: str | None, *, seed: int, store: Path, data_dir: str | Path | None,
                    gold: str | None, bounds: tuple[int | None, int | None], cache: bool,
                    hooks: tuple[OnPlan | None, OnEdit | None]) -> Attribution:
    with open_source(target, store, writable=True) as src:
        db, run = src.db, src.run
        if run is None:
            raise LemonError(f"{target} is a results store, not a run; name a run of it: lemon runs --store {target}")
        if item is None and src.trace_path is None:
            raise LemonError(f"name the item of run {run.run_id} to explain: lemon explain {target} ITEM "
                             f"(list them with `lemon trace {target}`)")
        row = db.items(run.run_id)[0] if item is None else resolve_item(db, run, item, seed)
        trace = db.trace(run.run_id, row.item_id, row.seed)
        if trace is None:
            raise LemonError(f"item {row.item_id} of run {run.run_id} has no stored trace; re-run it with lemon eval")
        pool = load_pool(run.pool, cache=cache)
        try:
            if src.trace_path is not None:
                plan = plan_trace(run, row, trace, pool, gold=gold, max_edits=bounds[0], budget_tokens=bounds[1])
            else:
                plan = plan_stored(run, row, trace, pool, data_dir=data_dir, max_edits=bounds[0],
                                   budget_tokens=bounds[1])
            if hooks[0] is not None:
                hooks[0](plan.attribution)
            return await explain_stored(db, plan, on_edit=hooks[1])
        finally:
            await pool.aclose()
