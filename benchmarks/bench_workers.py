"""P4: completion tokens/s of a worker server under 8 concurrent requests / embedded llama.cpp, same model.

The server is what `lemon serve` / `--serve-workers` start (`lemon.llm.serve`: `python -m llama_cpp.server`,
llama-cpp-python's `server` extra), reached through LEMON's OpenAI-compatible backend; the embedded side is
`EmbeddedBackend` in this process. Same GGUF (SmolLM2-135M, the `tiny` pool), same context, threads and
sampling (temperature 0.7, a seed per request, repeat penalty 1.0, 128 new tokens), the same 8 prompts.

To say what limits P4, two more rates are measured: the server one request at a time (`served@1`), so that
served@8 / served@1 is what concurrency buys on the server (batching), and served@1 / embedded is the cost of
the process boundary (HTTP, JSON, a second process on the same cores). Rounds alternate embedded and served,
and the best round of each counts (the machine is shared).

Run: `python benchmarks/bench_workers.py [--rounds 2] [-v]`. Prints one line, `P4 <ratio> ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.embedded import EmbeddedBackend
from lemon.llm.pools import load_pool
from lemon.llm.serve import serving

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


async def embedded_round(seed0: int) -> float:
    backend = EmbeddedBackend("smollm2-135m")
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


def measure(rounds: int) -> tuple[float, float, float]:
    """Best embedded, served@8 and served@1 rates over `rounds` alternating rounds."""
    emb, s8, s1 = [], [], []
    with tempfile.TemporaryDirectory() as tmp, serving("tiny", Path(tmp), port=free_port()) as pool_file:
        for k in range(rounds):
            emb.append(asyncio.run(embedded_round(100 * k)))
            r8, r1 = asyncio.run(served_round(pool_file, 100 * k))
            s8.append(r8)
            s1.append(r1)
    return max(emb), max(s8), max(s1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    emb, s8, s1 = measure(args.rounds)
    print(f"P4 {s8 / emb:.2f}  completion tok/s served@8 {s8:.1f} / embedded {emb:.1f}; limits: batching "
          f"served@8/served@1 {s8 / s1:.2f} (llama_cpp.server runs one completion at a time), process boundary "
          f"served@1/embedded {s1 / emb:.2f}")


if __name__ == "__main__":
    main()
