"""`lemon serve`: the pool's embedded worker models, each in its own OpenAI-compatible server process.

A thin command over `lemon.llm.serve.serving`: it starts the servers, waits until each answers, writes the
served pool file and keeps them up until Ctrl-C (which here is the normal way to stop, exit 0). Any command
then uses them with `--pool FILE`; `lemon train` and `lemon sft` start their own with `--serve-workers`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from lemon.cli.options import DEFAULT_POOL, MaybeThreadsOpt, PoolOpt, apply_threads, consoles, opt, stop_on_signals


def serve_cmd(
    pool: PoolOpt = DEFAULT_POOL,
    port: Annotated[int, typer.Option(help="Port of the first server; the next models take the next ports.")] = 8700,
    out: Annotated[Path | None, opt("out", help="Folder for the served pool file and the server logs "
                                              "(default LEMON_HOME/served/POOL).")] = None,
    threads: MaybeThreadsOpt = None,
) -> None:
    """Serve the pool's embedded worker models (llama_cpp.server, or the llama-server that LEMON_LLAMA_SERVER
    names; one process per model) until Ctrl-C (or SIGTERM)."""
    from lemon.llm.pools import read_pool_config
    from lemon.llm.serve import llama_server_binary, plan_workers, serving
    from lemon.paths import lemon_home

    apply_threads(threads)
    stop_on_signals()
    console = consoles().out
    folder = out or lemon_home() / "served" / Path(read_pool_config(pool).name).name
    binary = llama_server_binary()
    with serving(pool, folder, port=port, binary=binary) as path:
        try:  # from the moment the servers are up, Ctrl-C is the normal stop, even while the lines print
            for w in plan_workers(read_pool_config(pool), port, binary):
                engine = "llama-server, 8 slots" if w.binary else "llama_cpp.server"
                console.print(f"{', '.join(w.levels)}: {w.model} on {w.base_url} ({engine})", markup=False,
                              highlight=False)
            console.print(f"served pool: {path}  (use --pool {path}; Ctrl-C stops the servers)", markup=False,
                          highlight=False)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            console.print("stopping the worker servers", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    if "serve" not in {c.name for c in app.registered_commands}:
        app.command("serve")(serve_cmd)
