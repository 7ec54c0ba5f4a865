"""`lemon`: run, exec, validate, models (and the benchmark/training commands registered by their layers).

A thin layer: parse options, call the library, print through rich. Every `LemonError` becomes one line on
stderr and exit code 2; a traceback means a bug in LEMON, not in the user's input.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.logging import RichHandler
from rich.markup import escape

from lemon.cli.options import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_POOL,
    DEFAULT_TEMPERATURE,
    ApiKeyEnvOpt,
    BaseUrlOpt,
    LemonTyper,
    MaxTokensOpt,
    MaybeThreadsOpt,
    ModelOpt,
    NoCacheOpt,
    PoolOpt,
    SeedOpt,
    TemperatureOpt,
    apply_threads,
    check_task,
    check_worker_options,
    consoles,
    opt,
    stop_on_sigterm,
)
from lemon.errors import LemonError

if TYPE_CHECKING:
    from lemon.cli.session import RunOptions

app = LemonTyper(
    name="lemon",
    help="LEMON: write an executable multi-agent spec for a task, run it, evaluate it, train the writer.",
    no_args_is_help=True,
)


def _print_version(value: bool) -> None:
    if value:
        from lemon import __version__

        consoles().out.print(f"lemon {__version__}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _configure(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show debug logs.")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print LEMON's version and exit.", is_eager=True,
                                          callback=_print_version)] = False,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=consoles().err, show_path=False, show_time=False)],
    )


def _check_run_options(max_tokens: int, budget_tokens: int | None, timeout: float | None,
                       temperature: float) -> None:
    """Usage errors for values a backend would read as "unlimited" (0, -1) or that cannot be met."""
    from lemon.runtime.budget import check_positive_int, check_timeout

    check_worker_options(max_tokens=max_tokens, temperature=temperature)
    check_positive_int("--budget-tokens", budget_tokens)
    check_timeout("--timeout", timeout)


@dataclass(frozen=True)
class RunFlags:
    """The worker, budget, trace and output flags `run` and `exec` share, declared once: `with_run_flags`
    turns each field into the same command-line option of both commands."""

    temperature: TemperatureOpt = DEFAULT_TEMPERATURE
    max_tokens: MaxTokensOpt = DEFAULT_MAX_TOKENS
    budget_tokens: Annotated[int | None, typer.Option(help="Cap on the run's tokens: orchestrator and workers.")] = None
    timeout: Annotated[float | None, typer.Option(help="Per-call timeout in seconds.")] = None
    seed: SeedOpt = 0
    out: Annotated[Path | None, opt("out", help="Folder for the trace JSON (default LEMON_HOME/runs).")] = None
    no_cache: NoCacheOpt = False
    model: ModelOpt = None
    base_url: BaseUrlOpt = None
    api_key_env: ApiKeyEnvOpt = None
    as_json: Annotated[bool, opt("as_json", help="Print one JSON object (answer, output, tokens, trace path) on "
                                                 "stdout; the spec and progress go to stderr.")] = False
    threads: MaybeThreadsOpt = None


def with_run_flags(fn: Callable[..., None]) -> Callable[..., None]:
    """`fn` (whose last parameter is `flags: RunFlags`) as a command with one option per `RunFlags` field in
    place of `flags`, after its own arguments and options; the given values reach `fn` as one `RunFlags`."""
    shared = [f.name for f in fields(RunFlags)]

    @functools.wraps(fn)
    def command(**kwargs: Any) -> None:
        flags = RunFlags(**{name: kwargs.pop(name) for name in shared})
        fn(**kwargs, flags=flags)

    hints = typing.get_type_hints(RunFlags, include_extras=True)
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
           for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "flags"]
    options = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
               for f in fields(RunFlags)]
    command.__signature__ = inspect.Signature([*own, *options])  # type: ignore[attr-defined]
    command.__annotations__ = {}
    return command


def _run_options(pool: str, flags: RunFlags) -> RunOptions:
    """What `run` and `exec` share, checked with the flags' names (the API checks them again, by its
    arguments' names); `--threads` applied; the pool `--model/--base-url` name, if given."""
    from lemon.api.session import RunSettings
    from lemon.cli.session import RunOptions, endpoint_pool

    _check_run_options(flags.max_tokens, flags.budget_tokens, flags.timeout, flags.temperature)
    apply_threads(flags.threads)
    settings = RunSettings(seed=flags.seed, temperature=flags.temperature, max_tokens=flags.max_tokens,
                           budget_tokens=flags.budget_tokens, timeout=flags.timeout, cache=not flags.no_cache)
    return RunOptions(endpoint_pool(pool, flags.model, flags.base_url, flags.api_key_env), settings, flags.out,
                      as_json=flags.as_json)


@app.command()
@with_run_flags
def run(
    task: Annotated[str, typer.Argument(help="The task, e.g. a GSM8K-style question.")],
    pool: PoolOpt = DEFAULT_POOL,
    orchestrator: Annotated[
        str, typer.Option(help="Who writes the spec: 'template' (the measured default teams, no model call), "
                               "'prompted' (a pool model under a JSON schema), or a trained policy (HF dir, "
                               "run dir or .gguf).")
    ] = "template",
    level: Annotated[str | None, typer.Option(help="Pool level that writes the spec (only with --orchestrator "
                                                    "prompted; default: the strongest).")] = None,
    *,
    flags: RunFlags,
) -> None:
    """Orchestrate TASK into a spec, execute it, and show the answer, the spec and tokens per agent."""
    from lemon.cli.session import run_task

    check_task(task)
    opts = _run_options(pool, flags)
    console = consoles().err if flags.as_json else consoles().out
    asyncio.run(run_task(console, task, opts, orchestrator=orchestrator, level=level))


@app.command("exec")
@with_run_flags
def exec_(
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    task: Annotated[str, typer.Argument(help="The task text.")],
    pool: PoolOpt = DEFAULT_POOL,
    *,
    flags: RunFlags,
) -> None:
    """Execute an existing SPEC on TASK."""
    from lemon.cli.session import exec_spec

    check_task(task)
    opts = _run_options(pool, flags)
    asyncio.run(exec_spec(consoles().err if flags.as_json else consoles().out, spec, task, opts))


@app.command()
def validate(
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    pool: PoolOpt = DEFAULT_POOL,
) -> None:
    """Check SPEC against the schema, the role library and the pool's capacity levels; list every problem."""
    from lemon.cli.session import validate_file

    validate_file(consoles().out, spec, pool)


@app.command()
def models(
    pool: PoolOpt = DEFAULT_POOL,
    verify: Annotated[bool, typer.Option("--verify", help="Re-hash every file (trust no stored stamp).")] = False,
    as_json: Annotated[bool, opt("as_json", help="Print the models as one JSON object on stdout.")] = False,
) -> None:
    """Show the model files of POOL's levels: installed, sha256-verified, size."""
    from lemon.cli.session import show_models

    show_models(consoles().out, pool, verify=verify, as_json=as_json)


def _register_layers() -> None:
    """Commands of the benchmark layer live next to it (`bench_cmds.py`); they register themselves here."""
    from lemon.cli import bench_cmds, cache_cmds, data_cmds, runs_cmds, serve_cmds, train_cmds, view_cmds

    bench_cmds.register(app)
    cache_cmds.register(app)
    data_cmds.register(app)
    runs_cmds.register(app)
    serve_cmds.register(app)
    train_cmds.register(app)
    view_cmds.register(app)


_register_layers()


def main() -> None:
    """Entry point: run the app, turning user-facing errors into one line and exit code 2.

    Typer's standalone mode handles its own usage errors (an unknown option or a bad value: the usage, one
    error line, exit 2) through the click copy it vendors; LemonError is ours to print.
    """
    stop_on_sigterm()
    try:
        app(prog_name="lemon")
    except LemonError as exc:
        # The message quotes user and model text (agent names, paths): markup in it is shown, not applied.
        consoles().err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # outside a command (LemonCommand says what a command keeps)
        consoles().err.print("interrupted", highlight=False)
        sys.exit(130)


if __name__ == "__main__":
    main()
