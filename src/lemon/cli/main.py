"""`lemon`: run, exec, validate, models (and the benchmark/training commands registered by their layers).

A thin layer: parse options, call the library, print through rich. Every `LemonError` becomes one line on
stderr and exit code 2; a traceback means a bug in LEMON, not in the user's input.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from lemon.errors import LemonError

app = typer.Typer(
    name="lemon",
    help="LEMON: write an executable multi-agent spec for a task, run it, evaluate it, train the writer.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

PoolOpt = Annotated[str, typer.Option("--pool", help="Capacity pool: cpu, tiny, or a pool YAML file.")]


@app.callback()
def _configure(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show debug logs.")] = False,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False, show_time=False)],
    )


def _run_async(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


MaxTokensOpt = Annotated[int, typer.Option(help="Max new tokens per agent call.")]
BudgetOpt = Annotated[int | None, typer.Option(help="Cap on the run's tokens: orchestrator and workers.")]
TimeoutOpt = Annotated[float | None, typer.Option(help="Per-call timeout in seconds.")]
SeedOpt = Annotated[int, typer.Option(help="Seed for sampled calls.")]
TraceDirOpt = Annotated[Path | None, typer.Option(help="Where to save the trace JSON.")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Bypass the persistent LLM cache.")]


def _check_run_options(max_tokens: int, budget_tokens: int | None, timeout: float | None) -> None:
    """Usage errors for values a backend would read as "unlimited" (0, -1) or that cannot be met."""
    from lemon.runtime.budget import check_positive_int, check_timeout

    check_positive_int("--max-tokens", max_tokens)
    check_positive_int("--budget-tokens", budget_tokens)
    check_timeout("--timeout", timeout)


@app.command()
def run(
    task: Annotated[str, typer.Argument(help="The task, e.g. a GSM8K-style question.")],
    pool: PoolOpt = "cpu",
    orchestrator: Annotated[
        str, typer.Option(help="Who writes the spec: 'template' (the measured default teams, no model call), "
                               "'prompted' (a pool model under a JSON schema), or a trained policy (HF dir, "
                               "run dir or .gguf).")
    ] = "template",
    level: Annotated[str | None, typer.Option(help="Pool level that writes the spec for 'prompted' "
                                                    "(default: strongest).")] = None,
    temperature: Annotated[float, typer.Option(help="Worker sampling temperature (as lemon eval; a vote "
                                                    "needs samples that differ).")] = 0.7,
    max_tokens: MaxTokensOpt = 384,
    budget_tokens: BudgetOpt = None,
    timeout: TimeoutOpt = None,
    seed: SeedOpt = 0,
    trace_dir: TraceDirOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Orchestrate TASK into a spec, execute it, and show the spec, the answer and tokens per agent."""
    from lemon.cli.session import RunOptions, run_task

    _check_run_options(max_tokens, budget_tokens, timeout)
    if not 0.0 <= temperature <= 2.0:
        raise LemonError(f"--temperature must be in [0, 2], got {temperature}")
    opts = RunOptions(pool, max_tokens, budget_tokens, timeout, seed, trace_dir, cache=not no_cache,
                      temperature=temperature)
    _run_async(run_task(console, task, opts, orchestrator=orchestrator, level=level))


@app.command("exec")
def exec_(
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    task: Annotated[str, typer.Argument(help="The task text.")],
    pool: PoolOpt = "cpu",
    max_tokens: MaxTokensOpt = 384,
    budget_tokens: BudgetOpt = None,
    timeout: TimeoutOpt = None,
    seed: SeedOpt = 0,
    trace_dir: TraceDirOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Execute an existing SPEC on TASK."""
    from lemon.cli.session import RunOptions, exec_spec

    _check_run_options(max_tokens, budget_tokens, timeout)
    opts = RunOptions(pool, max_tokens, budget_tokens, timeout, seed, trace_dir, cache=not no_cache)
    _run_async(exec_spec(console, spec, task, opts))


@app.command()
def validate(
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    pool: PoolOpt = "cpu",
) -> None:
    """Check SPEC against the schema, the role library and the pool's capacity levels."""
    from lemon.cli.session import validate_file

    validate_file(console, spec, pool)


@app.command()
def models(
    pool: PoolOpt = "cpu",
    verify: Annotated[bool, typer.Option("--verify", help="Re-hash every file (trust no stored stamp).")] = False,
) -> None:
    """Show which model files are installed and sha256-verified."""
    from lemon.cli.session import show_models

    show_models(console, pool, verify=verify)


def _register_layers() -> None:
    """Commands of the benchmark layer live next to it (`bench_cmds.py`); they register themselves here."""
    from lemon.cli import bench_cmds, train_cmds, view_cmds

    bench_cmds.register(app)
    train_cmds.register(app)
    view_cmds.register(app)


_register_layers()


def main() -> None:
    """Entry point: run the app, turning user-facing errors into one line and exit code 2.

    Typer's standalone mode handles its own usage errors (an unknown option or a bad value: the usage, one
    error line, exit 2) through the click copy it vendors; LemonError is ours to print.
    """
    try:
        app(prog_name="lemon")
    except LemonError as exc:
        # The message quotes user and model text (agent names, paths): markup in it is shown, not applied.
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
