"""`lemon serve`: the pool's embedded worker models behind one OpenAI-compatible address.

A thin command over `lemon.llm.serve.serving` and `lemon.llm.gate`: it starts one server per model on
127.0.0.1 (llama.cpp's llama-server when LEMON_LLAMA_SERVER names one, else llama_cpp.server; with `--engine
embedded`, LEMON's own embedded backend, `lemon.llm.embedded_server`), waits until each
answers, writes the served pool file, and serves the checked OpenAI API in front of them on --host and --port
until Ctrl-C (which here is the normal way to stop, exit 0). Any command then uses them with `--pool FILE`;
`lemon train` and `lemon sft` start their own with `--serve-workers`.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lemon.cli.options import DEFAULT_POOL, MaybeThreadsOpt, PoolOpt, apply_threads, consoles, opt, stop_on_signals

if TYPE_CHECKING:
    from lemon.llm.serve import Worker

API_KEY_ENV = "LEMON_SERVE_API_KEY"


class Engine(StrEnum):
    """What runs each model behind the gate."""

    server = "server"  # llama.cpp's server: llama-server when LEMON_LLAMA_SERVER names one, else llama_cpp.server
    embedded = "embedded"  # LEMON's embedded backend: the embedded levels' own draws, with log-probabilities


def serve_cmd(
    pool: PoolOpt = DEFAULT_POOL,
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface; the model servers "
                                           "behind stay on 127.0.0.1).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port clients use (the next ports for further models, as "
                                           "--serve-workers); the model servers behind take the ports after.")] = 8700,
    api_key: Annotated[str | None, typer.Option(
        envvar=API_KEY_ENV, show_envvar=True,
        help="Require 'Authorization: Bearer KEY' (HTTP 401 without); the served pool file reads the key from "
             f"{API_KEY_ENV}.")] = None,
    out: Annotated[Path | None, opt("out", help="Folder for the served pool file and the server logs "
                                              "(default LEMON_HOME/served/POOL).")] = None,
    threads: MaybeThreadsOpt = None,
    engine: Annotated[Engine, typer.Option(
        help="server: llama.cpp's llama-server when LEMON_LLAMA_SERVER names one, else llama_cpp.server (no "
             "log-probabilities); embedded: LEMON's embedded backend, the same replies and log-probabilities as "
             "the pool's embedded levels on the same seeds (one request at a time per model).")] = Engine.server,
) -> None:
    """Serve the pool's embedded worker models with the OpenAI chat API until Ctrl-C (or SIGTERM).

    One server per model (llama.cpp's llama-server when LEMON_LLAMA_SERVER names one, as
    experiments/build_llama_server.sh prints; else llama_cpp.server) behind a check that answers as the API
    does: 404 for a model it does not serve (GET /v1/models lists them), 400 for a bad request, 401 without
    --api-key's key. Not done: endpoints other than POST /v1/chat/completions and GET /v1/models; n > 1
    (400); roles other than system, user, assistant; tools, functions, images; TLS. Log-probabilities need
    llama-server, or --engine embedded (whose draws are the embedded levels' own). See docs/serve.md."""
    import asyncio

    from lemon.llm.gate import run_gate
    from lemon.llm.pools import read_pool_config
    from lemon.llm.serve import (
        _check_port_free,
        client_url,
        gate_routes,
        llama_server_binary,
        model_groups,
        plan_workers,
        serving,
    )
    from lemon.paths import lemon_home

    apply_threads(threads)
    stop_on_signals()
    cfg = read_pool_config(pool)
    folder = out or lemon_home() / "served" / Path(cfg.name).name
    embedded = engine is Engine.embedded
    binary = None if embedded else llama_server_binary()
    ports = [port + k for k in range(len(model_groups(cfg)))]  # the gate: one port per model, as before
    for p in ports:
        _check_port_free(p, host)
    workers = plan_workers(cfg, port + len(ports), binary, embedded=embedded)  # the model servers, behind it
    urls = {w.alias: client_url(host, p) for w, p in zip(workers, ports, strict=True)}

    with serving(pool, folder, port=port + len(ports), binary=binary, urls=urls,
                 api_key_env=API_KEY_ENV if api_key else None, embedded=embedded) as path:
        try:  # from the moment the servers are up, Ctrl-C is the normal stop, even while the lines print
            asyncio.run(run_gate(gate_routes(workers), host, ports, api_key or None,
                                 lambda: _announce(workers, urls, path, bool(api_key))))
        except KeyboardInterrupt:
            consoles().out.print("stopping the worker servers", markup=False, highlight=False)


def _announce(workers: list[Worker], urls: dict[str, str], path: Path, keyed: bool) -> None:
    """Where each model is served, under which name, and the served pool file: once the gate listens."""
    console = consoles().out
    for w in workers:
        engine = {"llama-server": "llama-server, 8 slots", "llama_cpp.server": "llama_cpp.server, no logprobs",
                  "embedded": "embedded backend, its draws and logprobs"}[w.engine]
        console.print(f"{', '.join(w.levels)}: {w.model} on {urls[w.alias]} as model {w.alias!r} ({engine})",
                      markup=False, highlight=False)
    key = f"; clients send the key, the pool file reads it from {API_KEY_ENV}" if keyed else ""
    console.print(f"served pool: {path}  (use --pool {path}; Ctrl-C stops the servers{key})", markup=False,
                  highlight=False)


def register(app: typer.Typer) -> None:
    if "serve" not in {c.name for c in app.registered_commands}:
        app.command("serve")(serve_cmd)
