"""`lemon data fetch [BENCH]...`: download the benchmarks' upstream files into the data directory, verified.

A thin command over `lemon.benchmarks.fetch` (what is fetched, from where, and every bound and check are
there); this draws the progress bar and says what was fetched and what was already in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn
from rich.text import Text

from lemon.cli.options import LemonTyper, consoles, opt

if TYPE_CHECKING:
    from lemon.benchmarks.fetch import Plan

data_app = LemonTyper(help="Get the benchmarks' upstream data files (downloaded and sha256-verified).")

BenchArg = Annotated[list[str] | None, typer.Argument(
    help="Benchmarks to fetch: aqua, gsm8k, humaneval, mmlu, multiarith, svamp (default: all six).",
    show_default=False, metavar="BENCH")]
MirrorOpt = Annotated[str | None, typer.Option(
    "--mirror", help="Fetch from this mirror instead of the pinned upstream URLs: an http(s) URL laid out as the "
                     "data directory (<mirror>/svamp/SVAMP.json). Default LEMON_DATA_MIRROR.", show_default=False)]
DataDirOpt = Annotated[Path | None, opt("data_dir", help="The data directory to fill (default LEMON_DATA_DIR, "
                                                      "else ./data): the one --data-dir of lemon eval reads.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace present files whose sha256 differs from the pinned "
                                                        "one (a local edit or a damaged copy) instead of refusing.")]


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1_000_000 else f"{n / 1e3:.1f} kB"


def _report(console: Console, plan: Plan) -> None:
    """One line per benchmark: what was fetched, what was already in place, and where."""
    for bench in plan.benchmarks:
        fetched, size, present = plan.counts(bench)
        said = [f"fetched {fetched} file{'s' * (fetched != 1)} ({_size(size)}, sha256 verified)"] if fetched else []
        said += [f"{present} file{'s' * (present != 1)} already in place and verified"] if present else []
        console.print(Text(f"{bench}: {', '.join(said)} in {plan.root / bench}"))


@data_app.command("fetch")
def fetch_cmd(benchmarks: BenchArg = None, data_dir: DataDirOpt = None, mirror: MirrorOpt = None,
              force: ForceOpt = False) -> None:
    """Download BENCH's upstream files (pinned commits) into the data directory and verify each one's sha256;
    files already there and verified are skipped, so re-running resumes."""
    from lemon.benchmarks.fetch import plan_fetch, resolve_mirror, run_plan

    source = resolve_mirror(mirror)
    plan = plan_fetch(benchmarks or [], data_dir, force=force)
    err = consoles().err
    for f in plan.replace:
        err.print(Text(f"note: replacing {plan.root / f.path} (its sha256 differs from the pinned one; --force)"))
    bar = Progress(BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(), console=err,
                   disable=not err.is_terminal or not plan.todo, transient=True)
    with bar:
        task = bar.add_task("fetch", total=plan.todo_bytes)
        run_plan(plan, mirror=source, on_bytes=lambda n: bar.advance(task, n))
    _report(consoles().out, plan)


def register(app: typer.Typer) -> None:
    """Add `data` to the main CLI app (idempotent)."""
    if "data" not in {g.name for g in app.registered_groups}:
        app.add_typer(data_app, name="data")
