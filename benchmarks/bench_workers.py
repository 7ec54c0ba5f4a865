"""P4: completion tokens/s of a worker server under 8 concurrent requests / embedded llama.cpp, same model.

The server is what `lemon serve` / `--serve-workers` start (`lemon.llm.serve`: `python -m llama_cpp.server`,
llama-cpp-python's `server` extra), reached through LEMON's OpenAI-compatible backend; the embedded side is
`EmbeddedBackend` in this process. Same GGUF (SmolLM2-135M, the `tiny` pool), same context, threads and
sampling (temperature 0.7, a seed per request, repeat penalty 1.0, 128 new tokens), the same 8 prompts.

To say what limits P4, two more rates are measured: the server one request at a time (`served@1`), so that
served@8 / served@1 is what concurrency buys on the server (batching), and served@1 / embedded is the cost of
the process boundary (HTTP, JSON, a second process on the same cores). Rounds alternate embedded and served,
and the best round of each counts (the machine is shared).

Two engines: llama_cpp.server (one completion at a time: P4a) and, when a binary is given (`--llama-server
PATH` or LEMON_LLAMA_SERVER; `bash experiments/build_llama_server.sh` builds one), llama.cpp's own llama-server
with 8 slots and continuous batching (P4). Run: `python benchmarks/bench_workers.py [--rounds 2]
[--llama-server PATH] [-v]`. Prints one line per engine, `P4 <ratio> ...` (llama-server) and `P4a <ratio> ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from lemon.errors import run_script
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.embedded import EmbeddedBackend
from lemon.llm.pools import load_pool
from lemon.llm.serve import llama_server_binary, serving

log = logging.getLogger("bench_workers")

QUESTIONS = (
    "Natalia sold clips to 48 of her friends in April, and then half as many in May. How many in all?",
    "Weng earns $12 an hour for babysitting. Yesterday she did 50 minutes. How much did she earn?",
    "Betty needs $100 for a wallet. She has half of it, her parents give $15 and her grandparents twice that.",
    "James writes a 3-page letter to 2 different friends twice a week. How many pages a year?",
    "Mark has a garden with 10 yellow flowers, 80% more purple ones, and 25% as many green as both.",
    "Albert buys 2 large pizzas of 16 slices and 2 small ones of 8 slices. How many slices in all?",
    "Ken filled a box with 2 pounds of jelly beans, tripled the weight with brownies, then added 2 more.",
    "Alexis spent $200 on clothes: a shirt $30, pants $46, a coat $38, socks $11, a belt $18 and shoes.",
)
PARAMS = GenParams(temperature=0.7, max_tokens=128, repeat_penalty=1.0)


def requests(seed0: int) -> list[ChatRequest]:
    """The 8 requests of one measurement: one question each, a seed each."""
    return [ChatRequest((Message("user", f"{q} Answer step by step."),), dataclasses.replace(PARAMS, seed=seed0 + k))
            for k, q in enumerate(QUESTIONS)]


async def rate(backend: Any, reqs: Sequence[ChatRequest], concurrent: bool) -> tuple[float, int, float]:
    """(completion tokens / s, completion tokens, wall s) of `reqs`, all at once or one after another."""
    start = time.perf_counter()
    if concurrent:
        done = await asyncio.gather(*(backend.complete(r) for r in reqs))
    else:
        done = [await backend.complete(r) for r in reqs]
    wall = time.perf_counter() - start
    tokens = sum(c.completion_tokens for c in done)
    return tokens / wall, tokens, wall


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def embedded_round(model: str, seed0: int) -> float:
    backend = EmbeddedBackend(model)
    try:
        await rate(backend, requests(999)[:1], False)  # load + warm up
        r, tokens, wall = await rate(backend, requests(seed0), True)
        log.info("embedded: %d tokens in %.1f s = %.1f tok/s (8 requests, serialised on its thread)", tokens, wall, r)
        return r
    finally:
        await backend.aclose()


async def served_round(pool_file: Path, seed0: int) -> tuple[float, float]:
    pool = load_pool(str(pool_file), cache=False)
    backend = pool.backend("small")
    try:
        await rate(backend, requests(999)[:1], False)
        r8, tokens, wall = await rate(backend, requests(seed0), True)
        log.info("served@8: %d tokens in %.1f s = %.1f tok/s", tokens, wall, r8)
        r1, tokens, wall = await rate(backend, requests(seed0), False)
        log.info("served@1: %d tokens in %.1f s = %.1f tok/s", tokens, wall, r1)
        return r8, r1
    finally:
        await pool.aclose()


def one_model_pool(model: str, folder: Path) -> str:
    """A pool file whose every level is `model` (the `tiny` pool for SmolLM2)."""
    if model == "smollm2-135m":
        return "tiny"
    path = folder / "pool.yaml"
    path.write_text(yaml.safe_dump({"name": "bench", "levels": [{"name": "small", "backend": "embedded",
                                                                  "model": model}]}))
    return str(path)


def measure(model: str, rounds: int, binary: Path | None) -> tuple[float, dict[str, tuple[float, float]]]:
    """Best embedded rate, and best (served@8, served@1) per server engine, over `rounds` alternating rounds."""
    engines = {"llama_cpp.server": None, **({"llama-server": binary} if binary else {})}
    emb: list[float] = []
    served: dict[str, list[tuple[float, float]]] = {name: [] for name in engines}
    with contextlib.ExitStack() as stack:
        pool = one_model_pool(model, Path(stack.enter_context(tempfile.TemporaryDirectory())))
        files = {name: stack.enter_context(serving(pool, Path(stack.enter_context(tempfile.TemporaryDirectory())),
                                                   port=free_port(), binary=b))
                 for name, b in engines.items()}
        for k in range(rounds):
            emb.append(asyncio.run(embedded_round(model, 100 * k)))
            for name, pool_file in files.items():
                served[name].append(asyncio.run(served_round(pool_file, 100 * k)))
    return max(emb), {name: (max(r[0] for r in rs), max(r[1] for r in rs)) for name, rs in served.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", default="smollm2-135m", help="a pinned model id (lemon models), e.g. "
                    "qwen2.5-coder-1.5b: the `cpu` pool's large")
    ap.add_argument("--llama-server", type=Path, default=None,
                    help="a llama.cpp llama-server binary (default: LEMON_LLAMA_SERVER, else none)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    emb, served = measure(args.model, args.rounds, args.llama_server or llama_server_binary())
    for pid, name in (("P4", "llama-server"), ("P4a", "llama_cpp.server")):
        if name not in served:
            continue
        s8, s1 = served[name]
        limit = ("continuous batching, 8 slots" if name == "llama-server" else "one completion at a time")
        print(f"{pid} {s8 / emb:.2f}  {args.model}: completion tok/s {name}@8 {s8:.1f} / embedded {emb:.1f}; "
              f"limits: batching served@8/served@1 {s8 / s1:.2f} ({limit}), process boundary "
              f"served@1/embedded {s1 / emb:.2f}")


if __name__ == "__main__":
    run_script(main)
