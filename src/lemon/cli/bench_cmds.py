"""`lemon eval` and `lemon report`: thin typer commands over `lemon.api.evaluate` and `lemon.evaluation.report`.

The lead registers them on the main app with `register(app)`. Option parsing only; the work is in the library.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from lemon.cli.options import (
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
_POOLED_HELP = ("Paired exact McNemar test of two rows pooled over the benchmarks, e.g. --pooled template,best; "
                "repeat it for more. A row is a method (template, esc@large), best (each benchmark's best fixed "
                "baseline), kinds (the most accurate fixed baseline per answer kind) or a per-kind rule such as "
                "number=esc/choice=esc/code=exsc.")
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
    from lemon.api.eval import evaluate
    from lemon.cli.progress import eval_progress_bar

    pool = _workers(pool, (model, base_url, api_key_env), max_tokens, temperature, threads)
    store_path = _eval_store(store, out)
    with eval_progress_bar(consoles().err) as on_progress:
        summary = evaluate(benchmark, method, split=split, limit=limit, seeds=seeds, first_seed=seed or 0, pool=pool,
                           level=level, temperature=temperature, max_tokens=max_tokens, agents=agents,
                           budget_tokens=budget_tokens, budget_tokens_total=budget_tokens_total, timeout=timeout,
                           cache=not no_cache, store=store_path, data_dir=data_dir, concurrency=concurrency,
                           retry_errors=retry_errors, ray=ray, shard=_parse_shard(shard),
                           serve_workers=serve_workers, on_progress=on_progress)
    _report_summary(summary, as_json=as_json)


def _workers(pool: str, endpoint: tuple[str | None, str | None, str | None], max_tokens: int | None,
             temperature: float, threads: int | None) -> str:
    """What the worker flags say, checked by the flags' names: the pool (`--pool`, or the one
    `--model`/`--base-url`/`--api-key-env` name); `--threads` applied."""
    from lemon.cli.session import endpoint_pool

    check_worker_options(max_tokens=max_tokens, temperature=temperature)
    apply_threads(threads)
    return endpoint_pool(pool, *endpoint)


def _report_summary(summary: Any, *, as_json: bool = False) -> None:
    """Print the summary (or, `as_json`, one JSON object) and where to see the run; exit with its status."""
    from lemon.evaluation.evaluate import exit_status, summary_lines

    console = consoles().out
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


def report_cmd(
    store: StoreOpt = None,
    out: Annotated[Path | None, opt("out", help="Folder to write results.md and accuracy-vs-tokens.png into.")] = None,
    file: Annotated[Path | None, opt("file", help="Write the markdown to this file, e.g. docs/results.md.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write accuracy-vs-tokens PNG, e.g. docs/x.png.")] = None,
    compare: Annotated[list[str] | None, typer.Option(help=_COMPARE_HELP)] = None,
    pooled: Annotated[list[str] | None, typer.Option(help=_POOLED_HELP)] = None,
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
    rows = [_compare_pair(value, "--pooled") for value in pooled or ()]
    markdown = output_file(out, file, "results.md")
    if plot is None and out is not None and markdown is not None and markdown.parent == out:
        plot = out / "accuracy-vs-tokens.png"
    # grading every agent's reply runs code replies in the sandbox: a minute or more on HumanEval
    grading = consoles().err.status("grading every agent's reply...") if replies else contextlib.nullcontext()
    with open_existing_store(path) as db, grading:  # read-only: a report writes nothing into the store
        report = build_report(db, out=markdown, plot=plot, compare=pairs, replies=replies, data_dir=data_dir,
                              pooled=rows)
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
    pooled = [{"a": r.a, "b": r.b, "pairs": r.pairs, "a_only": r.a_only, "b_only": r.b_only, "p_value": r.p_value,
               "benchmarks": [{"benchmark": p.benchmark, "run_a": p.a.run.run_id if p.a else None,
                               "run_b": p.b.run.run_id if p.b else None, "pairs": p.pairs, "a_only": p.a_only,
                               "b_only": p.b_only, "left_out": p.left_out or None} for p in r.parts]}
              for r in report.pooled]
    return {"store": report.store_path, "generated_at": report.generated_at, "runs": runs, "comparisons": tests,
            "pooled": pooled, "wrote": written, "markdown": report.markdown}


#: What each option that takes `A,B` pairs, and its examples (the one line a bad value gets).
_PAIRED = {"--compare": ("two methods or run ids", "--compare cot,sc-cot or --compare vanilla,best"),
           "--pooled": ("two rows", "--pooled template,best or --pooled template,number=esc/choice=esc/code=exsc")}


def _compare_pair(value: str, option: str = "--compare") -> tuple[str, str]:
    """`A,B` -> (A, B); the last comma splits, so a first method may be a path that contains one."""
    a, sep, b = value.rpartition(",")
    if not sep or not a.strip() or not b.strip():
        what, examples = _PAIRED[option]
        raise LemonError(f"{option} {value!r}: write {what} joined by a comma, e.g. {examples}")
    return a.strip(), b.strip()


def register(app: typer.Typer) -> None:
    """Add `eval` and `report` to the main CLI app (idempotent; `trace` lives in view_cmds)."""
    names = {c.name for c in app.registered_commands}
    if "eval" not in names:
        app.command("eval")(eval_cmd)
    if "report" not in names:
        app.command("report")(report_cmd)
