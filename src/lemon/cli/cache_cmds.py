"""`lemon cache export FILE` / `lemon cache import FILE`: the LLM cache (and so the sample bank) as one
portable gzip file, so hours of drawn samples survive a change of machine and can be committed.

A thin command over `lemon.llm.cache_file`; the cache is LEMON_HOME's (`LEMON_HOME` picks another).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from lemon.cli.options import LemonTyper, consoles

if TYPE_CHECKING:
    from lemon.llm.cache import SQLiteCache
    from lemon.llm.cache_file import Transfer

cache_app = LemonTyper(help="Export the LLM cache (the sample bank) to one gzip file, or import one; write a "
                            "trained policy's card, which replays its specs from it.")

FileArg = Annotated[Path, typer.Argument(help="The gzip JSON-lines file (e.g. experiments/bank/cpu.jsonl.gz).")]


def _on_cache(action: Callable[[SQLiteCache], Transfer]) -> tuple[Transfer, Path]:
    """`action` on LEMON_HOME's LLM cache, closed afterwards; what it moved and the cache's path."""
    from lemon.llm.cache import SQLiteCache
    from lemon.paths import llm_cache_path

    cache = SQLiteCache(llm_cache_path())
    try:
        return action(cache), cache.path
    finally:
        cache.close()


@cache_app.command("export")
def export_cmd(file: FileArg) -> None:
    """Write every cached completion and reply score to FILE (byte-stable: sorted, no timestamp)."""
    from lemon.llm.cache_file import export_cache

    done, path = _on_cache(lambda cache: export_cache(cache, file))
    consoles().out.print(Text(f"exported {done.completions} completions and {done.scores} scores from {path} "
                              f"to {file}"))


@cache_app.command("import")
def import_cmd(file: FileArg) -> None:
    """Add FILE's completions and scores that the cache lacks (nothing is overwritten; a bad file adds
    nothing)."""
    from lemon.llm.cache_file import import_cache

    done, path = _on_cache(lambda cache: import_cache(cache, file))
    consoles().out.print(Text(f"imported {done.completions} completions and {done.scores} scores into {path} "
                              f"({done.kept} already there)"))


@cache_app.command("card")
def card_cmd(
    policy: Annotated[Path, typer.Argument(help="A trained policy: model directory, run directory or .gguf.")],
    card: Annotated[Path, typer.Argument(help="The card to write (a few hundred bytes, e.g. "
                                         "experiments/bank/policies/NAME.json).")],
) -> None:
    """Write the card that replays POLICY's specs from the LLM cache (`--orchestrator trained:CARD`): its
    content identity and prompt style, so a bank exported after evaluating it rebuilds its rows without the
    weights."""
    from lemon.files import write_output
    from lemon.orchestrator.policy_card import card_of
    from lemon.orchestrator.trained import resolve_policy_path

    found = card_of(resolve_policy_path(policy))
    write_output(card, found.to_json(), what="the policy card", fix="pass another CARD path")
    consoles().out.print(Text(f"wrote {card}: {found.model_id} (prompt {found.prompt_style}); name it as "
                              f"trained:{card} (lemon eval --method, lemon run --orchestrator) where the LLM "
                              "cache holds its specs"))


def register(app: typer.Typer) -> None:
    """Add `cache` to the main CLI app (idempotent)."""
    if "cache" not in {g.name for g in app.registered_groups}:
        app.add_typer(cache_app, name="cache")
