"""Worker models in their own processes: an OpenAI-compatible server per embedded model of a pool.

Why: a CUDA build of llama.cpp and CUDA torch cannot share one process (issue 25: `lemon sft` / `lemon train`
died with a segmentation fault on an H100 as soon as a llama.cpp model loaded after torch had used the GPU).
`serving(pool)` starts one `python -m llama_cpp.server` (llama-cpp-python's `server` extra, a dependency of
LEMON) per distinct embedded model, waits until each answers, and yields a pool file in which those levels
are `backend: openai` levels pointing at them; everything else (remote levels, defaults) is kept. The caller
talks to the workers through the existing OpenAI-compatible backend and never imports `llama_cpp` itself.
On leaving, the servers are stopped (terminate, then kill).

Same model, same settings: the server loads the same verified GGUF with the level's context and threads, and
the served pool sends `repeat_penalty: 1.0` (the embedded backend's default; the server's is 1.1). Ports are
`port, port + 1, ...` in level order, so a served level's model id (its URL) and its LLM-cache entries are the
same from run to run.

llama_cpp.server runs one completion at a time per model (no continuous batching): it moves llama.cpp out of
the caller's process, it does not make a CPU faster (`benchmarks/bench_workers.py`, P4a 1.00-1.09). With
`binary` (LEMON_LLAMA_SERVER: llama.cpp's own llama-server, experiments/build_llama_server.sh) each worker is
a llama-server with SERVED_CONCURRENCY slots that decode together: P4 4.08 on SmolLM2, 1.29 on the 1.5B.

Log-probabilities and the embedded levels' own draws (issue 54): `embedded=True` (`lemon serve --engine
embedded`) runs LEMON's embedded backend in each worker process instead (`lemon.llm.embedded_server`), so a
logprob gate or a learned stop rule decides on the served pool as on the embedded levels, on the same replies.
Why not llama_cpp.server, the same engine: it gives log-probabilities only when started with `--logits_all
true`. Its draws then stay the embedded ones (measured on SmolLM2, CPU: every step's logits bit-identical with
and without it, the same replies on the same seeds; a GPU is not measured), but it computes them by sorting the
whole vocabulary in Python for every token: +55 ms a token for SmolLM2's 49,152 entries (75 -> 126 ms a token
here, +67 %) and ~280 ms for Qwen2.5's 151,936 (against ~35 ms to generate a token of the 1.5B), on every call
of a level that reads them, and every prompt position's logits are then kept. The embedded backend reads them
from the generation (`SampledLogprobs`, ~0.3 ms a token) with the same code in or out of process: the test
(tests/llm/test_served_logprobs.py) runs a gate team and a learned-rule team on the same seeds on embedded
`tiny` and through `lemon serve --engine embedded`, each over a fresh LLM cache, and finds the same replies,
log-probabilities equal to the last bit and the same stop decisions. llama-server stays the batching choice;
its draws are its own (other code reaches the logits).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from lemon.errors import BackendError, ConfigError
from lemon.llm.embedded import gpu_layers_from_env, threads_from_env, verified_model_file
from lemon.llm.gate import Route
from lemon.llm.pools import LevelConfig, PoolConfig, read_pool_config

log = logging.getLogger(__name__)

LLAMA_SERVER_ENV = "LEMON_LLAMA_SERVER"
DEFAULT_PORT = 8700      # LEMON_WORKER_PORT overrides it; process k of a data-parallel run adds 16 k
STARTUP_S = 180.0        # loading a 1.5B GGUF from a cold disk on 2 cores takes well under a minute
SERVED_CONCURRENCY = 8   # requests in flight per served model (the server queues them)
SERVED_TIMEOUT_S = 600.0  # one attempt, queueing behind the other in-flight requests included


@dataclass(frozen=True)
class Worker:
    """One server: the model file it serves, the alias it answers to, where, and the levels it serves."""

    model: str
    path: Path
    alias: str
    port: int
    n_ctx: int
    n_threads: int
    levels: tuple[str, ...]
    binary: Path | None = None  # llama.cpp's `llama-server` (continuous batching); None: llama_cpp.server
    embedded: bool = False  # LEMON's embedded backend (`embedded_server.py`): the embedded levels' own draws

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def logprobs(self) -> bool:
        """Whether the server gives each reply's token log-probabilities (a logprob gate may run there)."""
        return self.binary is not None or self.embedded

    @property
    def engine(self) -> str:
        return "embedded" if self.embedded else "llama-server" if self.binary is not None else "llama_cpp.server"


def model_file(lv: LevelConfig) -> Path:
    """The verified GGUF of an embedded level (a pinned id, or a .gguf path checked against its sha256)."""
    return verified_model_file(lv.model, lv.sha256)


def llama_server_binary() -> Path | None:
    """llama.cpp's `llama-server` when LEMON_LLAMA_SERVER names one (a path, or a name on PATH): it batches the
    requests in flight (`--parallel`), where llama_cpp.server runs one at a time. None: llama_cpp.server."""
    raw = os.environ.get(LLAMA_SERVER_ENV, "").strip()
    if not raw:
        return None
    found = shutil.which(raw)
    if found is None:
        raise ConfigError(f"{LLAMA_SERVER_ENV}={raw!r} is not an executable llama-server; build one with "
                          "`bash experiments/build_llama_server.sh`, or unset it to serve with llama_cpp.server")
    return Path(found)


def model_groups(cfg: PoolConfig) -> dict[tuple[str, int, int | None], list[str]]:
    """The embedded levels by (model, context, threads), in level order: one worker server each."""
    found: dict[tuple[str, int, int | None], list[str]] = {}
    for lv in cfg.levels:
        if lv.backend == "embedded":
            found.setdefault((lv.model, lv.n_ctx, lv.n_threads), []).append(lv.name)
    return found


def plan_workers(cfg: PoolConfig, port: int = DEFAULT_PORT, binary: Path | None = None, *,
                 embedded: bool = False) -> list[Worker]:
    """One worker per distinct (model, context, threads) among the embedded levels, in level order: a
    llama-server (`binary`), LEMON's embedded backend (`embedded`, which wins), else llama_cpp.server. Each
    engine answers to its own alias, so their replies never share LLM-cache entries (llama-server: another
    sampler, other draws; embedded: replies banked with their log-probabilities, which llama_cpp.server's lack)."""
    found = model_groups(cfg)
    by_name = {lv.name: lv for lv in cfg.levels}
    binary = None if embedded else binary
    suffix = "-embedded" if embedded else "-llama-server" if binary else ""
    workers = []
    for k, ((model, n_ctx, n_threads), levels) in enumerate(found.items()):
        threads = n_threads or threads_from_env() or max(1, os.cpu_count() or 1)
        workers.append(Worker(model, model_file(by_name[levels[0]]), Path(model).stem.lower() + suffix, port + k,
                              n_ctx, threads, tuple(levels), binary, embedded))
    return workers


def served_config(cfg: PoolConfig, workers: list[Worker], *, urls: Mapping[str, str] | None = None,
                  api_key_env: str | None = None) -> dict[str, Any]:
    """The pool, as YAML data, with every served level an OpenAI-compatible level on its worker (or on
    `urls[alias]`, `lemon serve`'s gate, with the key from `api_key_env` when it has one)."""
    served = {name: w for w in workers for name in w.levels}
    levels = []
    for lv in cfg.levels:
        w = served.get(lv.name)
        if w is None:
            levels.append(lv.model_dump(mode="json", exclude_defaults=True))
            continue
        url = (urls or {}).get(w.alias, w.base_url)
        level = {"name": lv.name, "backend": "openai", "model": w.alias, "base_url": url,
                 "concurrency": max(lv.concurrency, SERVED_CONCURRENCY), "timeout_s": SERVED_TIMEOUT_S,
                 "schema_style": "llama_cpp"}
        if w.logprobs:  # llama-server and the embedded engine give each reply's token log-probabilities
            level["logprobs"] = True
        levels.append({**level, "api_key_env": api_key_env} if api_key_env else level)
    defaults = cfg.defaults.model_dump(mode="json", exclude_defaults=True)
    if cfg.defaults.repeat_penalty is None:
        defaults["repeat_penalty"] = 1.0  # embedded llama.cpp's default; llama_cpp.server's is 1.1
    return {"name": f"{cfg.name}-served"[:64], "defaults": defaults, "levels": levels}


def server_command(w: Worker) -> list[str]:
    """`python -m llama_cpp.server` for one worker (the same interpreter, so the same llama-cpp-python), or
    llama-server with SERVED_CONCURRENCY slots of the level's context each (continuous batching), or LEMON's
    embedded backend with the level's own settings (`embedded_server.py`)."""
    if w.embedded:
        return [sys.executable, "-m", "lemon.llm.embedded_server", "--model", str(w.path), "--alias", w.alias,
                "--port", str(w.port), "--n-ctx", str(w.n_ctx), "--threads", str(w.n_threads),
                "--gpu-layers", str(gpu_layers_from_env())]
    if w.binary is not None:
        return [str(w.binary), "--model", str(w.path), "--alias", w.alias, "--host", "127.0.0.1",
                "--port", str(w.port), "--ctx-size", str(w.n_ctx * SERVED_CONCURRENCY),
                "--parallel", str(SERVED_CONCURRENCY), "--threads", str(w.n_threads),
                "--threads-batch", str(w.n_threads), "--n-gpu-layers", str(gpu_layers_from_env()),
                "--no-webui", "--log-disable"]
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(w.path), "--model_alias", w.alias,
            "--host", "127.0.0.1", "--port", str(w.port), "--n_ctx", str(w.n_ctx), "--n_threads", str(w.n_threads),
            "--n_threads_batch", str(w.n_threads), "--n_gpu_layers", str(gpu_layers_from_env()),
            "--logits_all", "false", "--use_mlock", "false"]  # as the embedded Llama (the server's own defaults
    # differ: logits of every position, which changes llama.cpp's kernels and so sampled tokens, and mlock)


def worker_port() -> int:
    """The first port of this process's workers: LEMON_WORKER_PORT (default 8700) + 16 x LOCAL_RANK, so
    the processes of one `accelerate launch` each serve their own workers, as each loaded its own models."""
    raw = os.environ.get("LEMON_WORKER_PORT", "").strip() or str(DEFAULT_PORT)
    try:
        base = int(raw) + 16 * int(os.environ.get("LOCAL_RANK", "0") or 0)
    except ValueError:
        raise ConfigError(f"LEMON_WORKER_PORT={raw!r} is not a port number; use e.g. 8700") from None
    if not 1024 <= base <= 65_000:
        raise ConfigError(f"LEMON_WORKER_PORT={raw!r}: worker ports start at {base}; use 1024..65000")
    return base


def gate_routes(workers: list[Worker]) -> dict[str, Route]:
    """`lemon serve`'s gate: each worker's alias to its server; log-probabilities where it gives them, usage at
    the end of a stream where it is llama-server; the embedded engine's streams are asked of it whole."""
    return {w.alias: Route(w.alias, w.base_url, logprobs=w.logprobs, stream_usage=w.binary is not None,
                           streams=not w.embedded) for w in workers}


def client_url(host: str, port: int) -> str:
    """The base URL a client on this machine uses for a server listening on `host` (any address: loopback)."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


def has_embedded(pool: str) -> bool:
    return any(lv.backend == "embedded" for lv in read_pool_config(pool).levels)


@contextlib.contextmanager
def workers_for(pool: str, serve: bool, work_dir: Path) -> Iterator[str]:
    """The pool a command's calls go to: `pool` itself, or (`serve`, and it has embedded levels) its served
    copy, with the servers running until the block ends. Training and SFT serve whenever torch uses a GPU."""
    if not serve or not has_embedded(pool):
        yield pool
        return
    with serving(pool, work_dir, port=worker_port(), binary=llama_server_binary()) as path:
        yield str(path)


def _check_port_free(port: int, host: str = "127.0.0.1") -> None:
    """A server listens on `port` already: one line. SO_REUSEADDR, as uvicorn binds: the connections a
    stopped server leaves in TIME_WAIT for a minute do not keep its successor (train-global after train-cf)
    from starting there, so they must not fail this check either."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        what = "is in use (another worker server?)" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc})"
        raise ConfigError(f"port {port} on {host} {what}; stop it, or pass another --port (LEMON_WORKER_PORT "
                          "for train and sft)") from None


def _answers(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def wait_healthy(proc: subprocess.Popen[bytes], w: Worker, log_path: Path, startup_s: float) -> None:
    """Until the server lists its models; a server that exits or stays silent is one line naming its log."""
    deadline = time.monotonic() + startup_s
    while not _answers(w.base_url):
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] if log_path.exists() else []
            raise BackendError(f"worker server for {w.model} exited ({proc.returncode}): {' '.join(tail)[:300]}; "
                               f"see {log_path} (is the `server` extra of llama-cpp-python installed?)")
        if time.monotonic() > deadline:
            raise BackendError(f"worker server for {w.model} did not answer on {w.base_url} within {startup_s:.0f} "
                               f"s; see {log_path}")
        time.sleep(0.25)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate, wait, kill if it will not go."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def serving(pool: str, work_dir: Path, *, port: int = DEFAULT_PORT, startup_s: float = STARTUP_S,
            binary: Path | None = None, urls: Mapping[str, str] | None = None,
            api_key_env: str | None = None, embedded: bool = False) -> Iterator[Path]:
    """Start a worker server per embedded model of `pool` (`plan_workers` picks the engine), wait for all, yield
    the served pool file (`work_dir/pool.yaml`, its levels on the servers or on `urls`; server logs beside
    it); stop the servers on leaving, whatever happened."""
    cfg = read_pool_config(pool)
    workers = plan_workers(cfg, port, binary, embedded=embedded)
    for w in workers:
        _check_port_free(w.port)
    work_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    try:
        for w in workers:
            logs.append((work_dir / f"{w.alias}-{w.port}.log").open("wb"))
            procs.append(subprocess.Popen(server_command(w), stdout=logs[-1], stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL))
        for w, proc in zip(workers, procs, strict=True):
            wait_healthy(proc, w, work_dir / f"{w.alias}-{w.port}.log", startup_s)
            log.info("worker server for %s (levels %s) on %s", w.model, ", ".join(w.levels), w.base_url)
        path = work_dir / "pool.yaml"
        served = served_config(cfg, workers, urls=urls, api_key_env=api_key_env)
        path.write_text(yaml.safe_dump(served, sort_keys=False), encoding="utf-8")
        yield path
    finally:
        for proc in procs:
            stop(proc)
        for fh in logs:
            fh.close()
