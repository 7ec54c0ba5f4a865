"""`lemon eval` and `lemon report`: thin typer commands over `lemon.evaluation.evaluate` and `lemon.evaluation.report`.

The lead registers them on the main app with `register(app)`. Option parsing only; the work is in the library.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from lemon.cli.options import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_POOL,
    DEFAULT_TEMPERATURE,
    ApiKeyEnvOpt,
    BaseUrlOpt,
    BenchMaxTokensOpt,
    DataDirOpt,
    LimitOpt,
    MaybeThreadsOpt,
    ModelOpt,
    NoCacheOpt,
    PoolOpt,
    SeedsOpt,
    ServeWorkersOpt,
    StoreOpt,
    TemperatureOpt,
    apply_threads,
    check_worker_options,
    consoles,
    emit_json,
    opt,
)
from lemon.errors import LemonError
from lemon.evaluation.methods import method_help, shown_level

_METHOD_HELP = method_help()
_COMPARE_HELP = ("Paired exact McNemar test of two methods (or run ids), e.g. --compare cot,sc-cot; repeat it "
                 "for more pairs. `--compare template,best` pairs the template with the most accurate fixed baseline.")
_REPLIES_HELP = ("Also show, per benchmark, where each multi-agent run lost its answer: every agent's reply graded "
                 "alone (reads the benchmark's items, --data-dir).")


def _parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise LemonError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    return i, n


EvalJsonOpt = Annotated[bool, opt("as_json", help="Print the summary as one JSON object on stdout (the progress bar "
                                                "goes to stderr).")]


def eval_cmd(
    benchmark: Annotated[str, typer.Argument(help="gsm8k, svamp, aqua, multiarith, mmlu or humaneval "
                                                  "(or module:OBJECT, a benchmark defined elsewhere).")],
    method: Annotated[str, typer.Option("--method", "-m", help=_METHOD_HELP)],
    split: Annotated[str | None, typer.Option(help="Split (default: the evaluation split).")] = None,
    limit: LimitOpt = None,
    seeds: SeedsOpt = 1,
    seed: Annotated[int | None, opt("seed", help="Only replicate S (with --seeds K: S..S+K-1), e.g. to add seed 3 "
                                                  "to a run of seeds 0..2.")] = None,
    pool: PoolOpt = DEFAULT_POOL,
    level: Annotated[str | None, typer.Option(help="Capacity level of every agent of a fixed baseline "
                                                    "(default medium); the other methods pick levels.")] = None,
    concurrency: Annotated[int, typer.Option(help="(item, seed) runs in flight at once.")] = 4,
    store: StoreOpt = None,
    out: Annotated[Path | None, opt("out", help="Folder for the results store (OUT/results.sqlite), instead of "
                                                "--store.")] = None,
    data_dir: DataDirOpt = None,
    temperature: TemperatureOpt = DEFAULT_TEMPERATURE,
    max_tokens: BenchMaxTokensOpt = None,
    agents: Annotated[int | None, typer.Option(help="Agents in sc-cot/esc/asc (voters)/chain/complete/random.")] = None,
    budget_tokens: Annotated[int | None, typer.Option(help="Cap on worker tokens per item.")] = None,
    budget_tokens_total: Annotated[int | None, typer.Option(
        help="Cap on the tokens of the whole run (workers and orchestrator, earlier invocations included); "
             "items it cannot pay for are not computed (exit 4); a larger cap resumes.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Per-call timeout in seconds.")] = None,
    no_cache: NoCacheOpt = False,
    retry_errors: Annotated[bool, typer.Option("--retry-errors",
                                               help="Recompute items stored with status error.")] = False,
    ray: Annotated[str | None, typer.Option("--ray", help="Run on Ray: local, auto, or an address.")] = None,
    shard: Annotated[str | None, typer.Option(help="I/N: only every N-th pending item from I (parallel "
                                                   "processes filling one store).")] = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    threads: MaybeThreadsOpt = None,
    serve_workers: ServeWorkersOpt = None,
    as_json: EvalJsonOpt = False,
) -> None:
    """Evaluate METHOD on BENCHMARK; results are stored per item as they finish, and re-running resumes.

    Exit status: 0 all requested items computed, none in error; 2 bad input or a broken setup (also when the
    first 8 items all fail); 3 some items ended in error (counted in the summary; re-run with --retry-errors);
    4 --budget-tokens-total ran out before every item was computed.
    """
    from lemon.evaluation.evaluate import EvalPlan
    from lemon.evaluation.item import EvalSettings
    from lemon.evaluation.methods import resolve_method

    pool, max_tokens = _workers(benchmark, pool, (model, base_url, api_key_env), max_tokens, temperature, threads)
    resolved = resolve_method(method)
    at_pool = functools.partial(EvalSettings, benchmark=benchmark, method=resolved, temperature=temperature,
                                level=_eval_level(method, level, pool), n_agents=agents, budget_tokens=budget_tokens,
                                call_timeout_s=timeout, cache=not no_cache)
    plan = EvalPlan(split=split, limit=limit, seeds=seeds, data_dir=data_dir, first_seed=seed or 0)
    execution = _execution(concurrency=concurrency, ray_address=ray, shard=_parse_shard(shard),
                           budget_tokens_total=budget_tokens_total, retry_errors=retry_errors)
    with _eval_workers(pool, resolved, serve_workers) as pool:
        settings = at_pool(pool=pool, max_tokens=_identity_max_tokens(pool, max_tokens))
        _evaluate_and_report(settings, plan, _eval_store(store, out), execution, as_json=as_json)


def _workers(benchmark: str, pool: str, endpoint: tuple[str | None, str | None, str | None], max_tokens: int | None,
             temperature: float, threads: int | None) -> tuple[str, int]:
    """What the worker flags say: the pool (`--pool`, or the one `--model`/`--base-url`/`--api-key-env` name)
    and the reply limit (`--max-tokens`, else the benchmark's own), checked; `--threads` applied."""
    from lemon.cli.session import endpoint_pool

    max_tokens = _worker_max_tokens(benchmark, max_tokens)
    check_worker_options(max_tokens=max_tokens, temperature=temperature)
    apply_threads(threads)
    return endpoint_pool(pool, *endpoint), max_tokens


def _execution(**how: Any) -> Any:
    """`evaluate.Execution(**how)`, imported when a command runs (the CLI starts without the evaluation stack)."""
    from lemon.evaluation.evaluate import Execution

    return Execution(**how)


@contextlib.contextmanager
def _eval_workers(pool: str, method: Any, serve: bool | None) -> Iterator[str]:
    """The pool the evaluation calls: `pool`, or its served copy (`--serve-workers`; by default whenever a
    trained policy's torch finds a GPU, where a CUDA llama.cpp in the same process crashes it). The served
    file is `lemon serve`'s (LEMON_HOME/served/POOL/pool.yaml at the same port), so a run started against
    `lemon serve` resumes under `--serve-workers` and back: a run is named by its pool file's content."""
    from lemon.evaluation.methods import loads_torch
    from lemon.llm.pools import read_pool_config
    from lemon.llm.serve import workers_for
    from lemon.paths import lemon_home

    if serve is None:
        serve = loads_torch(method) and _torch_sees_a_gpu()
    folder = lemon_home() / "served" / Path(read_pool_config(pool).name).name
    with workers_for(pool, serve, folder) as served:
        yield served


def _torch_sees_a_gpu() -> bool:
    """Asked only for a trained policy, which imports torch anyway."""
    import torch

    return bool(torch.cuda.is_available())


def _evaluate_and_report(settings: Any, plan: Any, store: Path | None, execution: Any, *,
                         as_json: bool = False) -> None:
    """Evaluate under a progress bar, print the summary (or, `as_json`, one JSON object) and where to see the
    run; exit with its status."""
    from lemon.cli.progress import eval_progress_bar
    from lemon.evaluation.evaluate import evaluate, exit_status, summary_lines

    console, err_console = consoles()
    with eval_progress_bar(err_console) as on_progress:
        summary = asyncio.run(evaluate(settings, plan, store=store, execution=execution, on_progress=on_progress))
    code = exit_status(summary)
    if as_json:
        emit_json(summary_json(summary, code))
    else:
        _print_summary(console, summary, summary_lines)
        console.print(f"see it: lemon view {summary.run_id} --store {summary.store_path}", markup=False,
                      highlight=False)
    if code:
        raise typer.Exit(code)


def summary_json(summary: Any, exit_code: int) -> dict[str, Any]:
    """What `lemon eval --json` prints: the run, what this call did, the run's totals, and the exit status."""
    st = summary.stats
    return {"run_id": summary.run_id, "store": summary.store_path, "benchmark": summary.benchmark,
            "split": summary.split, "method": summary.method, "pool": summary.pool,
            "level": shown_level(summary.method, summary.level), "n_items": summary.n_items, "seeds": summary.seeds,
            "computed": summary.computed, "resumed": summary.skipped, "in_error": summary.in_error,
            "not_computed": summary.not_computed, "top_error": summary.top_error,
            "budget_tokens_total": summary.budget_tokens_total, "eval_tokens": summary.eval_tokens,
            "accuracy": st.accuracy_mean, "accuracy_std": st.accuracy_std, "per_seed_accuracy": st.per_seed_accuracy,
            "worker_tokens_per_item": st.tokens_mean, "orchestrator_tokens_per_item": st.orchestrator_tokens_mean,
            "items_not_ok": st.errors, "spec_sources": st.spec_sources, "exit_status": exit_code}


def _eval_store(store: Path | None, out: Path | None) -> Path | None:
    """`--out DIR` is a folder, as for every command: the run's store is DIR/results.sqlite."""
    if store is not None and out is not None:
        raise LemonError("--store (a file) and --out (its folder) both say where results go; pass one of them")
    return out / "results.sqlite" if out is not None else store


def _print_summary(console: Any, summary: Any, summary_lines: Any) -> None:
    """The summary lines are rich markup around user-given text (a trained:PATH method, a pool file, --store):
    that text is escaped. A method that chooses its levels shows no `--level`."""
    shown = dataclasses.replace(summary, method=escape(summary.method), pool=escape(summary.pool),
                                store_path=escape(str(summary.store_path)),
                                level=shown_level(summary.method, summary.level))
    for line in summary_lines(shown):
        console.print(line, highlight=False)


def _uses_level(method: str) -> bool:
    """Only a fixed baseline puts every agent at one `--level`; orchestrators choose levels per agent."""
    from lemon.evaluation.methods import uses_level

    return uses_level(method)


def _eval_level(method: str, level: str | None, pool: str) -> str:
    """The level the run is stored under: `--level` (default medium) for a baseline, checked against the pool
    here, before the progress bar or any model starts (the library's own check came only once the run had
    begun). For the other methods an explicit `--level` is refused (it would change nothing but the run id);
    they are stored under `medium` as before (their run ids stay), or the pool's first level when it has no
    `medium`."""
    from lemon.llm.pools import pool_level_names

    levels = pool_level_names(pool)
    if _uses_level(method):
        if (level or "medium") not in levels:
            said = f"--level {level!r} is not" if level is not None else "the default --level 'medium' is not"
            raise LemonError(f"{said} a level of pool {pool}; pass --level one of: {', '.join(levels)}")
        return level or "medium"
    if level is not None:
        raise LemonError(f"--level applies to the fixed baselines; method {method!r} chooses the level of each "
                         "agent itself: drop --level")
    return "medium" if "medium" in levels else levels[0]


def _worker_max_tokens(benchmark: str, max_tokens: int | None) -> int:
    """`--max-tokens`, else the benchmark's own reply length (AQuA's chain of thought needs 1,024), else LEMON's
    default. Resolved here, before the run's identity: a run records the value its workers had, so AQuA runs
    stored at 384 are found again with `--max-tokens 384`."""
    from lemon.benchmarks.base import reply_tokens
    from lemon.benchmarks.registry import get_benchmark

    if max_tokens is not None:
        return max_tokens
    return reply_tokens(get_benchmark(benchmark)) or DEFAULT_MAX_TOKENS


def _identity_max_tokens(pool: str, max_tokens: int) -> int | None:
    """What goes into the run's identity: None ("the pool's default", as runs stored before --max-tokens had
    one default) when the pool's default is that value anyway, so those runs still resume; the value when it
    differs (e.g. `tiny`, whose 128 is now 384: its results change, and so does its run id)."""
    from lemon.llm.pools import read_pool_config

    return None if read_pool_config(pool).defaults.max_tokens == max_tokens else max_tokens


def report_cmd(
    store: StoreOpt = None,
    out: Annotated[Path | None, opt("out", help="Folder to write results.md and accuracy-vs-tokens.png into.")] = None,
    file: Annotated[Path | None, opt("file", help="Write the markdown to this file, e.g. docs/results.md.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write accuracy-vs-tokens PNG, e.g. docs/x.png.")] = None,
    compare: Annotated[list[str] | None, typer.Option(help=_COMPARE_HELP)] = None,
    replies: Annotated[bool, typer.Option(help=_REPLIES_HELP)] = False,
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, opt("as_json", help="Print the report as one JSON object on stdout: each run's "
                                                 "numbers, the paired tests, and the markdown.")] = False,
) -> None:
    """Tables of accuracy (mean ± std over seeds) and tokens per benchmark, paired tests, and a plot.

    The terminal gets the report rendered for its width (tables wrap, nothing is cut); the Markdown goes to
    --file (or --out), e.g. docs/results.md."""
    from lemon.cli.options import output_file
    from lemon.evaluation.report import build_report
    from lemon.evaluation.store import default_store_path, open_existing_store

    console = consoles().out
    path = store or default_store_path()
    pairs = [_compare_pair(value) for value in compare or ()]
    markdown = output_file(out, file, "results.md")
    if plot is None and out is not None and markdown is not None and markdown.parent == out:
        plot = out / "accuracy-vs-tokens.png"
    # grading every agent's reply runs code replies in the sandbox: a minute or more on HumanEval
    grading = consoles().err.status("grading every agent's reply...") if replies else contextlib.nullcontext()
    with open_existing_store(path) as db, grading:  # read-only: a report writes nothing into the store
        report = build_report(db, out=markdown, plot=plot, compare=pairs, replies=replies, data_dir=data_dir)
    written = [w for w in (markdown, report.plot_path) if w is not None]
    if as_json:
        emit_json(report_json(report, written))
        return
    from lemon.cli.fit import markdown_blocks

    for block in markdown_blocks(report.markdown):
        console.print(block)
    for w in written:
        console.print(f"wrote {w}", markup=False, highlight=False)
    console.print(f"see the runs item by item: lemon view --store {path}", markup=False, highlight=False)


def report_json(report: Any, written: list[Path]) -> dict[str, Any]:
    """What `lemon report --json` prints: each run's numbers (as the tables show them, unrounded), the paired
    tests, the files written, and the markdown document itself."""
    runs = [{"run_id": s.run.run_id, "benchmark": s.run.benchmark, "split": s.run.split, "method": s.run.method,
             "pool": s.run.pool, "level": shown_level(s.run.method, s.run.level),
             "temperature": s.run.config.get("temperature"), "n_items": s.n_items, "seeds": s.seeds, "rows": s.rows,
             "complete": s.complete, "accuracy": s.accuracy_mean, "accuracy_std": s.accuracy_std,
             "per_seed_accuracy": s.per_seed_accuracy, "worker_tokens_per_item": s.tokens_mean,
             "orchestrator_tokens_per_item": s.orchestrator_tokens_mean, "cost_per_item": s.cost,
             "param_tokens_per_item": s.param_tokens_mean, "wall_s_per_item": s.wall_s_mean, "errors": s.errors,
             "replies": s.replies, "reply_limit": s.reply_limit, "replies_at_limit": s.replies_at_limit,
             "spec_sources": s.spec_sources} for s in report.stats]
    tests = [{"run_a": c.run_a.run_id, "run_b": c.run_b.run_id, "method_a": c.run_a.method,
              "method_b": c.run_b.method, "pairs": c.pairs, "a_only": c.a_only, "b_only": c.b_only,
              "both_right": c.both_right, "both_wrong": c.both_wrong, "p_value": c.p_value, "seeds": c.seeds}
             for c in report.comparisons]
    return {"store": report.store_path, "generated_at": report.generated_at, "runs": runs, "comparisons": tests,
            "wrote": written, "markdown": report.markdown}


def _compare_pair(value: str) -> tuple[str, str]:
    """`A,B` -> (A, B); the last comma splits, so a first method may be a path that contains one."""
    a, sep, b = value.rpartition(",")
    if not sep or not a.strip() or not b.strip():
        from lemon.errors import LemonError

        raise LemonError(f"--compare {value!r}: write two methods or run ids joined by a comma, "
                         "e.g. --compare cot,sc-cot or --compare vanilla,best")
    return a.strip(), b.strip()


def register(app: typer.Typer) -> None:
    """Add `eval` and `report` to the main CLI app (idempotent; `trace` lives in view_cmds)."""
    names = {c.name for c in app.registered_commands}
    if "eval" not in names:
        app.command("eval")(eval_cmd)
    if "report" not in names:
        app.command("report")(report_cmd)
