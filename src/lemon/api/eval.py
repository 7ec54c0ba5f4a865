"""Evaluate a method on a benchmark: the use case of `lemon eval`, for the CLI and scripts.

Why here: what `lemon eval` decides before the harness starts (the reply limit of the benchmark, the level a
run is stored under, which pool file goes into the run's identity, whether the workers are served out of
process beside a trained policy's torch) lived in the CLI, so a script calling `lemon.evaluation.evaluate`
stored its runs under other ids than the command's and could not resume them. `lemon.evaluate` decides it the
one way; `lemon eval` parses options, calls it and prints the summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lemon.api.session import sync
from lemon.benchmarks.base import reply_tokens
from lemon.benchmarks.registry import get_benchmark
from lemon.errors import LemonError
from lemon.evaluation.evaluate import EvalPlan, EvalSummary, Execution, OnProgress
from lemon.evaluation.evaluate import evaluate as evaluate_run
from lemon.evaluation.item import EvalSettings
from lemon.evaluation.methods import Method, loads_torch, resolve_method, uses_level
from lemon.llm.defaults import DEFAULT_MAX_TOKENS, DEFAULT_POOL, DEFAULT_TEMPERATURE
from lemon.llm.pools import pool_level_names, read_pool_config
from lemon.paths import lemon_home
from lemon.runtime.budget import check_positive_int


def evaluate(benchmark: str, method: str, *, split: str | None = None, limit: int | None = None, seeds: int = 1,
             first_seed: int = 0, pool: str | Path = DEFAULT_POOL, level: str | None = None,
             temperature: float = DEFAULT_TEMPERATURE, max_tokens: int | None = None, agents: int | None = None,
             budget_tokens: int | None = None, budget_tokens_total: int | None = None, timeout: float | None = None,
             cache: bool = True, store: str | Path | None = None, data_dir: str | Path | None = None,
             concurrency: int = 4, retry_errors: bool = False, ray: str | None = None,
             shard: tuple[int, int] | None = None, serve_workers: bool | None = None,
             on_progress: OnProgress | None = None) -> EvalSummary:
    """Evaluate `method` (`vanilla`, `sc-cot`, `template`, `prompted`, `trained:PATH`...) on `benchmark`
    (`gsm8k`, `mmlu`, `humaneval`...): what `lemon eval BENCHMARK --method METHOD` does, with its defaults.

    The pairs are the first `limit` items of `split` (default: the benchmark's evaluation split, read from
    `data_dir` or LEMON_DATA_DIR) times seeds `first_seed`..`first_seed + seeds - 1`. Each pair's row is stored
    in `store` (default LEMON_HOME/results.sqlite) as it finishes, and calling again resumes the same run.
    `max_tokens` None is the benchmark's own reply limit (AQuA and MMLU 1,024), else 384; `level` is every
    agent's level for a fixed baseline (default `medium`), refused for a method that chooses levels;
    `budget_tokens` caps each item's worker tokens and `budget_tokens_total` the whole run's (items it cannot
    pay for are not computed). `serve_workers` runs the workers out of process (None: only beside a trained
    policy's torch on a GPU). `on_progress` gets an `EvalProgress` before the first pair and after each row.

    Returns the `EvalSummary`: the run id and store, what this call computed, resumed, left in error or out,
    and the run's accuracy (mean and std over seeds) and tokens per item (`summary.stats`); `lemon report`
    and `lemon view RUN_ID` read the stored run.
    """
    return sync(aevaluate(
        benchmark, method, split=split, limit=limit, seeds=seeds, first_seed=first_seed, pool=pool, level=level,
        temperature=temperature, max_tokens=max_tokens, agents=agents, budget_tokens=budget_tokens,
        budget_tokens_total=budget_tokens_total, timeout=timeout, cache=cache, store=store, data_dir=data_dir,
        concurrency=concurrency, retry_errors=retry_errors, ray=ray, shard=shard, serve_workers=serve_workers,
        on_progress=on_progress))


async def aevaluate(benchmark: str, method: str, *, split: str | None = None, limit: int | None = None,
                    seeds: int = 1, first_seed: int = 0, pool: str | Path = DEFAULT_POOL, level: str | None = None,
                    temperature: float = DEFAULT_TEMPERATURE, max_tokens: int | None = None,
                    agents: int | None = None, budget_tokens: int | None = None,
                    budget_tokens_total: int | None = None, timeout: float | None = None, cache: bool = True,
                    store: str | Path | None = None, data_dir: str | Path | None = None, concurrency: int = 4,
                    retry_errors: bool = False, ray: str | None = None, shard: tuple[int, int] | None = None,
                    serve_workers: bool | None = None, on_progress: OnProgress | None = None) -> EvalSummary:
    """`evaluate`, awaited (the same arguments, the same summary)."""
    pool, replies = str(pool), worker_max_tokens(benchmark, max_tokens)
    if not 0.0 <= temperature <= 2.0:
        raise LemonError(f"temperature must be in [0, 2], got {temperature}")
    resolved = resolve_method(method)
    plan = EvalPlan(split=split, limit=limit, seeds=seeds, data_dir=data_dir, first_seed=first_seed)
    execution = Execution(concurrency=concurrency, ray_address=ray, shard=shard,
                          budget_tokens_total=budget_tokens_total, retry_errors=retry_errors)
    stored_level = eval_level(method, level, pool)
    with eval_workers(pool, resolved, serve_workers) as workers:
        settings = EvalSettings(benchmark=benchmark, method=resolved, level=stored_level, pool=workers,
                                temperature=temperature, max_tokens=identity_max_tokens(workers, replies),
                                n_agents=agents, budget_tokens=budget_tokens, call_timeout_s=timeout, cache=cache)
        return await evaluate_run(settings, plan, store=store, execution=execution, on_progress=on_progress)


def worker_max_tokens(benchmark: str, max_tokens: int | None) -> int:
    """`max_tokens`, else the benchmark's own reply length (AQuA's chain of thought needs 1,024), else LEMON's
    default. Resolved before the run's identity: a run records the value its workers had, so AQuA runs stored
    at 384 are found again with `--max-tokens 384`."""
    if max_tokens is not None:
        check_positive_int("max_tokens", max_tokens)
        return max_tokens
    return reply_tokens(get_benchmark(benchmark)) or DEFAULT_MAX_TOKENS


def identity_max_tokens(pool: str, max_tokens: int) -> int | None:
    """What goes into the run's identity: None ("the pool's default", as runs stored before --max-tokens had
    one default) when the pool's default is that value anyway, so those runs still resume; the value when it
    differs (e.g. `tiny`, whose 128 is now 384: its results change, and so does its run id)."""
    return None if read_pool_config(pool).defaults.max_tokens == max_tokens else max_tokens


def eval_level(method: str, level: str | None, pool: str) -> str:
    """The level the run is stored under: `level` (default medium) for a baseline, checked against the pool
    here, before the progress bar or any model starts (the library's own check came only once the run had
    begun). For the other methods an explicit `level` is refused (it would change nothing but the run id);
    they are stored under `medium` as before (their run ids stay), or the pool's first level when it has no
    `medium`."""
    levels = pool_level_names(pool)
    if uses_level(method):
        if (level or "medium") not in levels:
            said = f"--level {level!r} is not" if level is not None else "the default --level 'medium' is not"
            raise LemonError(f"{said} a level of pool {pool}; pass --level one of: {', '.join(levels)}")
        return level or "medium"
    if level is not None:
        raise LemonError(f"--level applies to the fixed baselines; method {method!r} chooses the level of each "
                         "agent itself: drop --level")
    return "medium" if "medium" in levels else levels[0]


@contextmanager
def eval_workers(pool: str, method: Method, serve: bool | None) -> Iterator[str]:
    """The pool the evaluation calls: `pool`, or its served copy (`serve_workers`; by default whenever a
    trained policy's torch finds a GPU, where a CUDA llama.cpp in the same process crashes it). The served
    file is `lemon serve`'s (LEMON_HOME/served/POOL/pool.yaml at the same port), so a run started against
    `lemon serve` resumes under `--serve-workers` and back: a run is named by its pool file's content."""
    from lemon.llm.serve import workers_for

    if serve is None:
        serve = loads_torch(method) and torch_sees_a_gpu()
    folder = lemon_home() / "served" / Path(read_pool_config(pool).name).name
    with workers_for(pool, serve, folder) as served:
        yield served


def torch_sees_a_gpu() -> bool:
    """Asked only for a trained policy, which imports torch anyway."""
    import torch

    return bool(torch.cuda.is_available())

