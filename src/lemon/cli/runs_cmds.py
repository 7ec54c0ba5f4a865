"""`lemon runs`: list the runs of a results store (filtered by benchmark and method) and delete them.

Before this, a stored run was visible only through `lemon report` and removable only with sqlite3 by hand.
Everything goes through `ResultsStore`'s public methods; deleting asks for `--yes` and says what it removes.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from lemon.cli.options import LemonTyper, StoreOpt, consoles
from lemon.errors import LemonError
from lemon.evaluation.methods import shown_level
from lemon.evaluation.store import ResultsStore, RunInfo

runs_app = LemonTyper(help="List and delete the runs of a results store (with their items and traces).",
                      invoke_without_command=True)

BenchmarkFilter = Annotated[str | None, typer.Option(help="Only runs of this benchmark.")]
MethodFilter = Annotated[str | None, typer.Option("--method", "-m", help="Only runs of this method.")]


def _store_path(store: Path | None) -> Path:
    from lemon.evaluation.store import default_store_path

    return store or default_store_path()


def _selected(db: ResultsStore, run_ids: list[str] | None, benchmark: str | None,
              method: str | None) -> list[RunInfo]:
    """The runs named (ids or unique prefixes) or, without names, every run; then the filters."""
    runs = [db.resolve_run(r) for r in run_ids] if run_ids else db.runs()
    return [r for r in runs if (benchmark is None or r.benchmark == benchmark)
            and (method is None or r.method == method)]


JsonFlag = Annotated[bool, typer.Option("--json", help="Print the runs as JSON (one object per run).")]


@runs_app.callback()
def _default(ctx: typer.Context, store: StoreOpt = None, benchmark: BenchmarkFilter = None,
             method: MethodFilter = None, as_json: JsonFlag = False) -> None:
    """Without a subcommand: the same as `lemon runs list`."""
    if ctx.invoked_subcommand is None:
        list_cmd(store=store, benchmark=benchmark, method=method, as_json=as_json)


@runs_app.command("list")
def list_cmd(store: StoreOpt = None, benchmark: BenchmarkFilter = None, method: MethodFilter = None,
             as_json: JsonFlag = False) -> None:
    """One row per run: id, benchmark, split, method, pool, level, seeds, items stored of those requested."""
    from lemon.evaluation.store import open_existing_store

    path = _store_path(store)
    with open_existing_store(path) as db:
        runs = [(r, db.count(r.run_id)) for r in _selected(db, None, benchmark, method)]
        orphans = db.orphans()
    if orphans:  # on stderr: the table (or the JSON) on stdout keeps its shape
        consoles().err.print(Text(_orphans_line(orphans, path)))
    if as_json:
        consoles().out.file.write(json.dumps([_run_json(r, n) for r, n in runs], ensure_ascii=False, indent=1) + "\n")
        return
    table = Table(title=Text(f"{len(runs)} run(s) in {path}"), title_justify="left")
    # A run id is what the other commands take: never folded or cut, the other columns give way.
    table.add_column("run", no_wrap=True, min_width=max((len(r.run_id) for r, _ in runs), default=3))
    for col in ("benchmark", "split", "method", "pool", "level", "seeds", "stored", "updated"):
        table.add_column(col, overflow="fold")
    for r, n in runs:
        updated = datetime.datetime.fromtimestamp(r.updated).strftime("%Y-%m-%d %H:%M")
        table.add_row(*(Text(str(v)) for v in (
            r.run_id, r.benchmark, r.split, r.method, r.pool, shown_level(r.method, r.level), r.seeds,
            f"{n}/{r.n_items * r.seeds}", updated)))
    consoles().out.print(table)


def _orphans_line(orphans: dict[str, int], path: Path) -> str:
    """What `lemon runs` says of rows whose run row is gone (an evaluation that stored results after its run
    was deleted, before LEMON refused that): a later evaluation of the same run id would resume from them."""
    return (f"orphaned: {sum(orphans.values())} item row(s) of {len(orphans)} deleted run(s) "
            f"({', '.join(sorted(orphans)[:3])}{', ...' if len(orphans) > 3 else ''}) have no run row; remove "
            f"them with `lemon runs delete --orphans --yes --store {path}`")


def _delete_orphans(db: ResultsStore, path: Path, yes: bool) -> None:
    """`lemon runs delete --orphans`: every row whose run row is gone."""
    orphans = db.orphans()
    if not orphans:
        consoles().out.print(Text(f"no orphaned rows in {path}"))
        return
    if not yes:
        raise LemonError(f"{sum(orphans.values())} orphaned item row(s) of {len(orphans)} deleted run(s) would "
                         f"be removed from {path}; add --yes to remove them")
    consoles().out.print(Text(f"removed {db.delete_orphans()} orphaned item row(s) of {len(orphans)} deleted "
                              f"run(s) from {path}"))


def _run_json(r: RunInfo, stored: int) -> dict[str, object]:
    """A run as `lemon runs list --json` prints it: its identity, how much is stored, and when."""
    return {"run_id": r.run_id, "benchmark": r.benchmark, "split": r.split, "method": r.method, "pool": r.pool,
            "level": r.level, "shown_level": shown_level(r.method, r.level), "seeds": r.seeds, "n_items": r.n_items,
            "stored": stored, "requested": r.n_items * r.seeds, "temperature": r.config.get("temperature"),
            "created": r.created, "updated": r.updated}


@runs_app.command("delete")
def delete_cmd(
    run_ids: Annotated[list[str] | None, typer.Argument(help="Run ids or unique prefixes (default: every run "
                                                             "the filters select).")] = None,
    store: StoreOpt = None,
    benchmark: BenchmarkFilter = None,
    method: MethodFilter = None,
    yes: Annotated[bool, typer.Option("--yes", help="Really delete (without it, only say what would go).")] = False,
    orphans: Annotated[bool, typer.Option("--orphans", help="Remove the rows of deleted runs (items, traces) "
                                                            "that `lemon runs` reports as orphaned.")] = False,
) -> None:
    """Delete runs with their items, traces and attributions (asks for --yes).

    With no RUN_IDS a filter is required (deleting a whole store is `rm` of the file). An evaluation of a run
    deleted meanwhile stops at its next result with one line, storing nothing more."""
    from lemon.evaluation.store import open_existing_store

    if orphans and (run_ids or benchmark is not None or method is not None):
        raise LemonError("--orphans removes the rows of already deleted runs; give it without run ids or filters")
    if not orphans and not run_ids and benchmark is None and method is None:
        raise LemonError("name the runs to delete (ids or prefixes) or select them with --benchmark/--method")
    path = _store_path(store)
    out = consoles().out
    with open_existing_store(path, writable=True) as db:
        if orphans:
            _delete_orphans(db, path, yes)
            return
        runs = _selected(db, run_ids, benchmark, method)
        if not runs:
            raise LemonError(f"no run in {path} matches; list them with `lemon runs --store {path}`")
        items = sum(db.count(r.run_id) for r in runs)
        if not yes:
            for r in runs:
                out.print(Text(f"would delete {r.run_id} ({r.benchmark} {r.method}, {db.count(r.run_id)} items)"))
            raise LemonError(f"{len(runs)} run(s) with {items} item(s) would be deleted from {path}; "
                             "add --yes to delete them")
        for r in runs:
            if db.claimed_by_others(r.run_id, ""):
                out.print(Text(f"note: {r.run_id} is being evaluated; that evaluation stops at its next result"))
        deleted = sum(db.delete_run(r.run_id) for r in runs)
    out.print(Text(f"deleted {len(runs)} run(s) and {deleted} item(s) from {path}"))


def register(app: typer.Typer) -> None:
    """Add `runs` to the main CLI app (idempotent)."""
    if "runs" not in {g.name for g in app.registered_groups}:
        app.add_typer(runs_app, name="runs")
