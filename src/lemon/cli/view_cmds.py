"""`lemon trace`, `lemon explain`, `lemon view`, `lemon export`: read, explain and export stored runs.

Option parsing and printing only; the work is in `lemon.inspection.itemview`, `explain`, `view` and the exporters.
Everything a run's stored text puts on the terminal goes through rich `Text` (never markup), so an agent that
writes `[bold]` or `[/]` cannot break or restyle the output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lemon.cli.fit import FitTable
from lemon.cli.options import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_POOL,
    DataDirOpt,
    LemonTyper,
    MaybeThreadsOpt,
    NoCacheOpt,
    StoreOpt,
    apply_threads,
    consoles,
    opt,
    output_file,
    stop_on_signals,
)
from lemon.errors import LemonError
from lemon.evaluation.methods import shown_level
from lemon.inspection.tracefile import open_source

if TYPE_CHECKING:
    from lemon.runtime.trace import Trace

#: What `trace` and `export` read: a stored run or a `lemon run` trace.
RunOrTraceArg = Annotated[str, typer.Argument(help="Run id (or a unique prefix) of the store, or a trace file or "
                                                    "trace id that `lemon run` printed.")]


def _store_path(store: Path | None) -> Path:
    from lemon.evaluation.store import default_store_path

    return store or default_store_path()


# ---- lemon trace ----------------------------------------------------------------------------------------


def trace_cmd(
    run_id: RunOrTraceArg,
    item_id: Annotated[str | None, typer.Argument(help="Item id, e.g. multiarith/12 (or 12); omit to list the "
                                                        "run's items (a trace file has one, shown at once).")] = None,
    seed: Annotated[int, opt("seed", help="Seed of the replicate.")] = 0,
    store: StoreOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (the row, the agents, the raw trace).")] = False,
    out: Annotated[Path | None, opt("out", help="Folder to write the JSON into (trace-RUN.json) instead of "
                                                "printing.")] = None,
    file: Annotated[Path | None, opt("file", help="File to write the JSON to instead of printing.")] = None,
) -> None:
    """One evaluated item: task, gold, prediction, each agent's prompt, output and tokens; or the run's items.

    With ITEM_ID: the task, gold, prediction, each agent's prompt, output, model and tokens, and the stop event;
    without it, the run's items. A `lemon run` trace (file or id) is a run of one item."""
    from lemon.inspection.itemview import item_payload, resolve_item

    console = consoles().out
    with open_source(run_id, _store_path(store)) as src:
        db, run = src.db, _chosen_run(src, run_id)
        single = src.trace_path is not None
        target = output_file(out, file, f"trace-{run.run_id[:16]}.json")
        if item_id is None and not single:
            rows = db.items(run.run_id)
            if as_json or target is not None:
                _emit_json(console, [item_payload(run, r, None)["item"] for r in rows], target)
            else:
                console.print(_items_table(run, rows))
            return
        row = db.items(run.run_id)[0] if item_id is None else resolve_item(db, run, item_id, seed)
        trace = db.trace(run.run_id, row.item_id, row.seed)
    payload = item_payload(run, row, trace)
    if as_json or target is not None:
        _emit_json(console, payload, target)
        return
    if trace is None:
        raise LemonError(f"item {row.item_id} seed {row.seed} of run {run.run_id} has no stored trace (runs made "
                         "before traces moved into the store have none); re-run it with `lemon eval`")
    console.print(render_item(payload, trace))


def _chosen_run(src: Any, target: str) -> Any:
    """The run a command needs; a store file given where a run was expected is one line."""
    if src.run is None:
        raise LemonError(f"{target} is a results store, not a run; name a run of it: lemon runs --store {target}")
    return src.run


def _emit_json(console: Console, data: Any, out: Path | None) -> None:
    text = json.dumps(data, ensure_ascii=False, indent=1, default=str)
    if out is None:
        console.file.write(text + "\n")
        return
    from lemon.files import write_output

    write_output(out, text + "\n", what="the JSON")
    console.print(f"wrote {out}", highlight=False)


def _items_table(run: Any, rows: list[Any]) -> Table:
    from lemon.inspection.itemview import shown_status

    table = Table(title=f"run {run.run_id}: {run.benchmark}/{run.split}, {run.method}, pool {run.pool}, "
                        f"level {shown_level(run.method, run.level)} ({len(rows)} rows)", title_justify="left")
    for col in ("item", "seed", "right", "prediction", "gold", "tokens", "status"):
        table.add_column(col, justify="right" if col in ("seed", "tokens") else "left", overflow="fold")
    for r in rows:
        table.add_row(Text(r.item_id), str(r.seed), _verdict(r.correct, r.gold, short=True),
                      Text(_clip(r.prediction, 30)), Text(_clip(r.gold, 30)), str(r.total_tokens),
                      Text(shown_status(r.status, r.prediction)))
    return table


def _verdict(correct: bool, gold: str | None, *, short: bool = False) -> Text:
    """Right / wrong against the gold answer; a `lemon run` has none to judge by."""
    if gold is None:
        return Text("-" if short else "NO GOLD", "dim")
    word = ("yes" if correct else "no") if short else ("RIGHT" if correct else "WRONG")
    return Text(word, ("green" if correct else "red") if short else ("bold green" if correct else "bold red"))


def _clip(text: str | None, n: int) -> str:
    if text is None:
        return "-"
    one = " ".join(str(text).split())
    return one if len(one) <= n else one[: n - 1] + "…"


def render_item(payload: dict[str, Any], trace: Trace) -> Group:
    """The readable form of one item (`payload`: `item_payload` of it): header, task, orchestrator, one panel per
    agent, the stop events."""
    from lemon.inspection.itemview import orchestrator_event, stop_event

    run, item = payload["run"], payload["item"]
    head = Text.assemble(
        (f"run {run['run_id']}", "bold"), f"  {run['benchmark']}/{run['split']}  method {run['method']}  "
        f"pool {run['pool']}  level {shown_level(run['method'], run['level'])}\n",
        (f"item {item['item_id']}", "bold"), f"  seed {item['seed']}  ", _verdict(item["correct"], item["gold"]),
        f"  prediction {item['prediction']!s}  gold {_clip(item['gold'], 200)}\n",
        f"status {item['shown_status']} ({item['stop_reason'] or '-'})  worker tokens {item['total_tokens']}  "
        f"orchestrator tokens {item['orchestrator_tokens']}  latency {item['latency_s']:.2f}s")
    parts: list[Any] = [head]
    task = trace.task
    parts.append(Panel(Text(task) if task else Text("(not recorded: a trace from an older LEMON)", "dim"),
                       title="task", title_align="left"))
    orch = orchestrator_event(trace)
    if orch is not None:
        lines = Text(f"source {orch.get('source')}  tokens {orch.get('tokens', '-')}\n")
        for w in orch.get("warnings") or []:
            lines.append(f"repair: {w}\n", "yellow")
        lines.append(str(orch.get("raw") if orch.get("raw") is not None else "(raw output not recorded)"))
        parts.append(Panel(lines, title="orchestrator", title_align="left"))
    for a in payload["agents"]:
        parts.append(_agent_panel(a))
    for rule in payload.get("stop_rules") or []:
        parts.append(Text(stop_rule_line(rule)))
    stop = stop_event(trace)
    parts.append(Text.assemble(("stop: ", "bold"), f"{stop.get('reason', '-')} by {stop.get('agent', '-')}: "
                                                   f"{stop.get('detail', '')}"))
    return Group(*parts)


def stop_rule_line(e: dict[str, Any]) -> str:
    """One stop rule's decision in words: which voter stopped, by which rule, what ran and what was saved."""
    skipped = ", ".join(e.get("skipped") or ()) or "none"
    how = "fired after" if e.get("fired", True) else "did not fire (its max was reached) after"
    line = (f"stop rule {e.get('rule', '-')} of {e.get('agent', '-')} {how} {', '.join(e.get('ran') or ())}; "
            f"not run: {skipped} (about {e.get('tokens_saved_estimate', 0)} tokens saved)")
    return line + "".join(f"; {_controller_step(d)}" for d in e.get("decisions") or ())


def _controller_step(d: dict[str, Any]) -> str:
    """One decision of a learned rule: after which parents, what it did and on what probability (its opening is
    decided before any reply, on none)."""
    then = f" -> {d['next']}" if d.get("next") else ""
    if not d.get("after") and "p_right" not in d:
        return f"before any reply: {d.get('action', '-')}{then}"
    after = ", ".join(d.get("after") or ()) or "-"
    return f"after {after}: {d.get('action', '-')} (P(leader right) {d.get('p_right', '-')}){then}"


def _timing(a: dict[str, Any]) -> str:
    if a["latency_s"] is None:
        return "latency -"
    queued = f", queued {a['queued_s']:.2f}s" if a.get("queued_s") is not None else ""
    return f"model {a['latency_s']:.2f}s{queued}"


def _agent_panel(a: dict[str, Any]) -> Panel:
    from lemon.inspection.itemview import vote_tally

    body = Text()
    tok = (f"{a['prompt_tokens']} prompt + {a['completion_tokens']} completion tokens"
           if a["prompt_tokens"] is not None else "tokens not recorded")
    cached = "-" if a["cached"] is None else "yes" if a["cached"] else "no"
    body.append(f"model {a['model'] or '-'}  {tok}  cache hit {cached}  {_timing(a)}\n")
    if a.get("params"):
        body.append("sampling: " + ", ".join(f"{k} {v}" for k, v in a["params"].items() if v is not None) + "\n")
    if a.get("cut"):
        body.append(f"reply cut at max_tokens {a['params']['max_tokens']}: it stopped mid-answer\n", "bold red")
    if a["depends_on"]:
        body.append(f"reads: {', '.join(a['depends_on'])}\n")
    if a["duty"]:
        body.append(f"duty: {a['duty']}\n")
    if a["note"]:
        body.append(f"{a['note']}\n", "yellow")
    if a.get("votes") is not None:
        body.append("tally: " + "; ".join(f"{answer if answer is not None else '(no answer)'} x{len(voters)} "
                                          f"({', '.join(voters)})" for answer, voters in vote_tally(a["votes"]))
                    + "\n", "bold")
    elif a["prompt"] is None and a["ran"] and a["model"] != "vote":
        body.append("prompt: not recorded (a trace from an older LEMON)\n", "dim")
    for m in a["prompt"] or []:
        body.append(f"[{m['role']}]\n", "bold cyan")
        body.append(m["content"].rstrip() + "\n")
    if a["output"] is not None:
        body.append("[output]\n", "bold green")
        body.append(a["output"].rstrip())
    state = " NOT RUN: a stop rule fired first" if a.get("unrun") else "" if a["live"] else \
        " DEAD: does not reach the output"
    title = f"{a['name']} ({a['role']}, {a['capacity']})" + state
    return Panel(body, title=Text(title), title_align="left", border_style="blue" if a["live"] else "dim")


# ---- lemon explain --------------------------------------------------------------------------------------


def explain_cmd(
    target: Annotated[str, typer.Argument(help="A run id (or unique prefix) of the store, a trace file or trace id "
                                               "of `lemon run`, or a spec file.")],
    item: Annotated[str | None, typer.Argument(help="The item id of the run (e.g. multiarith/12), or the task text "
                                                    "of a spec file (a trace has one item).")] = None,
    seed: Annotated[int, opt("seed", help="Seed of the replicate (or of the spec's run).")] = 0,
    store: StoreOpt = None,
    max_edits: Annotated[int | None, typer.Option(help="Run at most this many edits.")] = None,
    budget_tokens: Annotated[int | None, typer.Option(help="Skip edits once their estimated worker tokens "
                                                           "would pass this.")] = None,
    data_dir: DataDirOpt = None,
    pool: Annotated[str, opt("pool", help="Pool for a spec file (a run uses its own).")] = DEFAULT_POOL,
    gold: Annotated[str | None, typer.Option(help="Gold answer of a spec file's or a trace's task (scores the "
                                                  "edits).")] = None,
    max_tokens: Annotated[int, opt("max_tokens", help="Max new tokens per worker call (spec file; a run uses its "
                                   "own).")] = DEFAULT_MAX_TOKENS,
    no_cache: NoCacheOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the attribution as JSON.")] = False,
    threads: MaybeThreadsOpt = None,
) -> None:
    """Counterfactual attribution: how each single-field edit of the spec changes correctness and tokens.

    Re-runs every applicable single-field edit (edge deleted, duty reverted, capacity lowered) and shows how
    each changes correctness and tokens. Stored with the run."""
    console, err = consoles()
    apply_threads(threads)

    def on_plan(att: Any) -> None:
        n, tokens, calls = att.estimate()
        cut = len(att.edits) - n
        err.print(f"explain: {n} edit(s) to run, about {tokens:,} worker tokens in {calls} model call(s)"
                  + (f"; {cut} not run (invalid or over a bound)" if cut else ""), highlight=False)

    def on_edit(e: Any) -> None:
        err.print(Text(f"  {e.edit}: calls {e.calls}, cache hits {e.cache_hits}, right {e.correct}"))

    from lemon.api.traces import explain

    att = explain(target, item, seed=seed, store=store, data_dir=data_dir, gold=gold, pool=pool, max_tokens=max_tokens,
                  max_edits=max_edits, budget_tokens=budget_tokens, cache=not no_cache, on_plan=on_plan,
                  on_edit=on_edit)
    if as_json:
        console.file.write(json.dumps(att.to_json(), ensure_ascii=False, indent=1, default=str) + "\n")
    else:
        console.print(attribution_table(att))


def attribution_table(att: Any) -> FitTable:
    """One row per field: the edit, the edited run's answer/correctness and tokens, Delta, calls, cache hits;
    it fits the terminal (`lemon.cli.fit`): words wrap whole, nothing is cropped."""
    o = att.original
    title = (f"attribution of {att.item_id} (seed {att.seed}"
             + (f", run {att.run_id}" if att.run_id else "") + f"): original right={o.get('correct')}, "
             f"prediction {o.get('prediction')!s:.40}, {o.get('tokens')} worker tokens; "
             f"{att.calls} model calls, {att.spent_tokens:,} tokens spent")
    rules = [stop_rule_line(e) for e in o.get("stop_rules") or ()]
    columns = ("field", "edit", "status", "prediction", "right", "Δ", "tokens", "Δ tokens", "calls", "cache hits",
               "note")
    numeric = {"Δ", "tokens", "Δ tokens", "calls", "cache hits"}
    rows = []
    for e in att.edits:
        delta = "-" if e.delta is None else f"{e.delta:+.0f}"
        style = "green" if (e.delta or 0) > 0 else "red" if (e.delta or 0) < 0 else ""
        rows.append([e.field_label, e.edit, e.status, _clip(e.prediction, 24),
                     "-" if e.correct is None else str(e.correct), Text(delta, style), _num(e.tokens),
                     _num(e.delta_tokens, signed=True), _num(e.calls), _num(e.cache_hits),
                     _clip(e.note, 60) if e.note else ""])
    return FitTable(columns, rows, title=Text(title), caption=Text("\n".join(rules)) if rules else None,
                    justify=["right" if c in numeric else "left" for c in columns])


def _num(v: int | None, signed: bool = False) -> str:
    return "-" if v is None else (f"{v:+,}" if signed else f"{v:,}")


# ---- lemon view -----------------------------------------------------------------------------------------


WATCH_MAX_S = 3600


def view_cmd(
    target: Annotated[str | None, typer.Argument(
        help="A results store file, a run id (or prefix) of --store, a trace file or trace id of `lemon run`, or "
             "a `lemon train` run directory; default: the default store.")] = None,
    store: StoreOpt = None,
    item: Annotated[str | None, typer.Option(help="Open the page on this item of the run.")] = None,
    seed: Annotated[int, opt("seed", help="Seed of --item.")] = 0,
    train: Annotated[list[Path] | None, typer.Option(help="Also show this `lemon train` run directory.")] = None,
    max_traces: Annotated[int, typer.Option(help="Traces embedded per run (the rest are listed, not shown).")] = 300,
    max_steps: Annotated[int, typer.Option(help="Training steps whose samples are embedded per run directory "
                                                "(evenly spaced, first and last always).")] = 100,
    out: Annotated[Path | None, opt("out", help="Folder to write lemon-view.html into.")] = None,
    file: Annotated[Path | None, opt("file", help="The HTML file to write (default ./lemon-view.html).")] = None,
    watch: Annotated[int | None, typer.Option(
        help="Keep the page current while `lemon eval` or `lemon train` writes: rewrite it every SECONDS when the "
             f"source changed (1..{WATCH_MAX_S}); the open page reloads itself. Ctrl-C stops.")] = None,
) -> None:
    """Write a self-contained HTML page (works offline) showing runs, items, DAGs, diffs, attributions, training."""
    from lemon.files import write_output

    console = consoles().out
    if max_traces < 0 or max_steps < 0:
        raise LemonError("--max-traces and --max-steps must be 0 or more")
    if watch is not None and not 1 <= watch <= WATCH_MAX_S:
        raise LemonError(f"--watch takes seconds between rewrites, 1..{WATCH_MAX_S}; got {watch}")
    dest = output_file(out, file, "lemon-view.html") or Path("lemon-view.html")
    train_dirs = [Path(d) for d in train or ()]

    def page() -> str:
        path = Path(target) if target is not None else None
        if path is not None and path.is_dir():
            from lemon.inspection.view.build import training_page

            return training_page([path, *train_dirs], max_steps=max_steps, watch=watch)
        return _store_html(target, store, item, seed, train_dirs, max_traces, max_steps, watch)

    html = page()
    write_output(dest, html, what="the page")
    console.print(f"wrote {dest} ({len(html) / 1e6:.1f} MB); open file://{dest.resolve()}", highlight=False)
    if watch is not None:
        _watch(page, dest, watch, _watched_files(target, store, train_dirs))


def _watched_files(target: str | None, store: Path | None, train_dirs: list[Path]) -> list[Path]:
    """The files whose change makes the page stale: the store and its WAL (or the trace file), and each
    training run directory's logs."""
    def logs(dirs: list[Path]) -> list[Path]:
        return [d / n for d in dirs for n in ("metrics.jsonl", "samples.jsonl", "run.json")]

    path = Path(target) if target is not None else None
    if path is not None and path.is_dir():
        return logs([path, *train_dirs])
    db = path if path is not None and path.is_file() else _store_path(store)
    return [db, db.with_name(db.name + "-wal"), *logs(train_dirs)]


def _stamp(files: list[Path]) -> tuple[tuple[int, int], ...]:
    """Size and modification time of each file (0, 0 when absent): what changes when a writer adds to it."""
    out = []
    for f in files:
        try:
            st = f.stat()
            out.append((st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((0, 0))
    return tuple(out)


def _watch(page: Any, dest: Path, every: int, files: list[Path]) -> None:
    """Rewrite `dest` every `every` seconds while the source changes, until Ctrl-C (exit 130, the page kept).
    Bounded: one page at a time, each as bounded as the first (--max-traces, --max-steps), none when nothing
    changed; a source that cannot be read any more ends the watch with its one-line error. Ctrl-C is its normal
    stop, so it is taken even where SIGINT was handed over ignored (a script's background job, a test runner that
    ignored it): `stop_on_signals`, as `lemon serve` does."""
    import time

    stop_on_signals()

    from lemon.files import write_output

    consoles().err.print(f"watching: {dest} is rewritten every {every} s while its source changes; Ctrl-C stops",
                         highlight=False, markup=False)
    seen = _stamp(files)
    while True:
        time.sleep(every)
        now = _stamp(files)
        if now == seen:
            continue
        write_output(dest, page(), what="the page")
        seen = now


def _store_html(target: str | None, store: Path | None, item: str | None, seed: int, train_dirs: list[Path],
                max_traces: int, max_steps: int, watch: int | None = None) -> str:
    """The page of a store, one of its runs, or a trace file (opened on its one item)."""
    from lemon.inspection.itemview import resolve_item
    from lemon.inspection.view.build import store_page

    with open_source(target, _store_path(store)) as src:
        db, run = src.db, src.run
        focus = None
        if run is not None and (item is not None or src.trace_path is not None):
            row = resolve_item(db, run, item, seed) if item is not None else db.items(run.run_id)[0]
            focus = (run.run_id, row.item_id, row.seed)
        elif item is not None:
            raise LemonError("--item needs a run: lemon view RUN --item ITEM")
        return store_page(db, run_ids=[run.run_id] if run is not None else None, focus=focus, max_traces=max_traces,
                          train_dirs=train_dirs, max_steps=max_steps, source=src.label, watch=watch)


# ---- lemon export ---------------------------------------------------------------------------------------

export_app = LemonTyper(help="Export stored runs: OpenTelemetry (OTLP/HTTP), an Inspect eval log, or a CSV table.",
                         no_args_is_help=True)


@export_app.command("otel")
def export_otel_cmd(
    run_id: RunOrTraceArg,
    endpoint: Annotated[str | None, typer.Option(help="OTLP/HTTP endpoint, e.g. http://127.0.0.1:4318/v1/traces or "
                                                      "Langfuse's https://cloud.langfuse.com/api/public/otel/v1/"
                                                      "traces (nothing is sent anywhere else).")] = None,
    header: Annotated[list[str] | None, typer.Option(help="NAME=VALUE sent with each request (repeatable), e.g. "
                                                          "'Authorization=Basic <base64 of pk:sk>' for Langfuse; "
                                                          "OTEL_EXPORTER_OTLP_HEADERS is read too.")] = None,
    item: Annotated[list[str] | None, typer.Option(help="Only these item ids (repeatable).")] = None,
    include_content: Annotated[bool, typer.Option("--include-content",
                                                  help="Add prompts and outputs as gen_ai.*.messages.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds per request to the endpoint.")] = 10.0,
    store: StoreOpt = None,
    out: Annotated[Path | None, opt("out", help="Folder to write the spans into (otel-RUN.jsonl), instead of "
                                                "sending them.")] = None,
    file: Annotated[Path | None, opt("file", help="File to write the spans to as OTLP/JSON lines, instead of "
                                                  "sending them.")] = None,
) -> None:
    """One OTel trace per item: a root span, an invoke_agent span per agent, chat spans with GenAI attributes."""
    try:
        from lemon.inspection.export_otel import build_spans, export_otel, otlp_headers, otlp_json_lines
    except ImportError as exc:
        raise LemonError(f"exporting to OpenTelemetry needs the [export] extra ({exc.name} is missing): "
                         "pip install -e '.[export]'") from None
    from lemon.files import write_output

    console = consoles().out
    with open_source(run_id, _store_path(store)) as src:
        run = _chosen_run(src, run_id)
        dest = output_file(out, file, f"otel-{run.run_id[:16]}.jsonl")
        if (dest is None) == (endpoint is None):
            raise LemonError("say where the spans go: --endpoint URL (send) or --file FILE / --out DIR (write)")
        if dest is not None:
            spans = build_spans(src.db, run, item_ids=item or None, include_content=include_content)
            write_output(dest, otlp_json_lines(spans), what="the spans")
            console.print(f"wrote {dest} ({len(spans)} spans of run {run.run_id})", highlight=False)
            return
        assert endpoint is not None
        n = export_otel(src.db, run, endpoint, item_ids=item or None, include_content=include_content,
                        timeout=timeout, headers=otlp_headers(header or ()))
    console.print(f"sent {n} spans of run {run.run_id} to {endpoint}", highlight=False)


@export_app.command("inspect")
def export_inspect_cmd(
    run_id: RunOrTraceArg,
    log_file: Annotated[Path | None, typer.Argument(help="The Inspect log file to write (.eval or .json).")] = None,
    out: Annotated[Path | None, opt("out", help="Folder to write RUN.eval into.")] = None,
    file: Annotated[Path | None, opt("file", help="The Inspect log file to write (.eval or .json).")] = None,
    store: StoreOpt = None,
) -> None:
    """An evaluation run (or a `lemon run` trace) as an Inspect eval log (open it with `inspect view`)."""
    from lemon.inspection.export_inspect import write_inspect_log

    console = consoles().out
    if log_file is not None and file is not None:
        raise LemonError("name the log file once: as the argument or with --file")
    with open_source(run_id, _store_path(store)) as src:
        run = _chosen_run(src, run_id)
        dest = output_file(out, file or log_file, f"{run.run_id[:16]}.eval")
        if dest is None:
            raise LemonError("say where to write the log: lemon export inspect RUN FILE.eval (or --out DIR)")
        n = write_inspect_log(src.db, run, dest)
    console.print(f"wrote {dest} ({n} samples of run {run.run_id})", highlight=False)


@export_app.command("csv")
def export_csv_cmd(
    run_ids: Annotated[list[str] | None, typer.Argument(help="Run ids or prefixes, or `lemon run` trace files or "
                                                             "ids (default: every run of the store).")] = None,
    out: Annotated[Path | None, opt("out", help="Folder to write results.csv into.")] = None,
    file: Annotated[Path | None, opt("file", help="The CSV file to write (default: print to stdout).")] = None,
    store: StoreOpt = None,
) -> None:
    """One row per (run, item, seed): correctness, prediction, gold, tokens, status, latency (stdout by default)."""
    from lemon.files import write_output
    from lemon.inspection.export_table import results_csv

    console = consoles().out
    dest = output_file(out, file, "results.csv")
    parts: list[str] = []
    n, n_runs = 0, 0
    targets: list[str | None] = list(run_ids) if run_ids else [None]
    for target in targets:
        with open_source(target, _store_path(store)) as src:
            runs = [src.run] if src.run is not None else src.db.runs()
            text, rows = results_csv(src.db, runs)
        parts.append(text if not parts else text.split("\n", 1)[1])
        n, n_runs = n + rows, n_runs + len(runs)
    if dest is None:
        console.file.write("".join(parts))
        return
    write_output(dest, "".join(parts), what="the CSV table")
    console.print(f"wrote {dest} ({n} rows of {n_runs} run(s))", highlight=False)


def register(app: typer.Typer) -> None:
    """Add `trace` (and, as they land, `explain`, `view`, `export`) to the main CLI app (idempotent)."""
    names = {c.name for c in app.registered_commands}
    if "trace" not in names:
        app.command("trace")(trace_cmd)
    if "explain" not in names:
        app.command("explain")(explain_cmd)
    if "view" not in names:
        app.command("view")(view_cmd)
    if "export" not in {g.name for g in app.registered_groups}:
        app.add_typer(export_app, name="export")
