"""P8: completion tokens/s of 2 embedded worker processes at 1 thread each / 1 process at 2 threads.

Why: the sample bank and the six-benchmark table are hours of one worker model on 2 cores. llama.cpp's token
generation is bound by memory bandwidth more than by arithmetic, so two processes with one thread each may
decode more tokens per second in all than one process with both threads; the experiment scripts can then run
two `lemon eval` processes on one store (they share its items through claims: `JOBS=2 THREADS=1`). Same model
(the `cpu` pool's `large` level by default), sampling (temperature 0.7, a seed per request, 160 new tokens)
and GSM8K-style prompts on every side; each process loads its model and warms up before the clock starts.
Rounds alternate the two sides and the best round of each counts (the machine is shared).

Run: `python benchmarks/bench_processes.py [--model qwen2.5-coder-1.5b] [--rounds 2] [--requests 3]`.
Prints one line, `P8 <ratio> ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time

from lemon.errors import run_script
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.embedded import EmbeddedBackend

QUESTION = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast and bakes muffins with four. She "
            "sells the rest at $2 per egg. How much does she make every day? Think step by step.")
PARAMS = GenParams(temperature=0.7, max_tokens=160, repeat_penalty=1.0)


async def _decode(model: str, n: int, seed0: int, start_at: float) -> dict[str, float]:
    """One worker process: load and warm up, wait for the common start, then `n` requests one after another."""
    backend = EmbeddedBackend(model)
    try:
        await backend.complete(ChatRequest((Message("user", "Say hi."),), dataclasses.replace(PARAMS, max_tokens=4)))
        time.sleep(max(0.0, start_at - time.time()))
        start, tokens = time.perf_counter(), 0
        for k in range(n):
            req = ChatRequest((Message("user", QUESTION),), dataclasses.replace(PARAMS, seed=seed0 + k))
            tokens += (await backend.complete(req)).completion_tokens
        return {"tokens": tokens, "wall": time.perf_counter() - start}
    finally:
        await backend.aclose()


def _side(model: str, processes: int, threads: int, n: int, seed0: int) -> float:
    """Completion tok/s of `processes` workers of `threads` threads each, started together (summed)."""
    start_at = time.time() + 15.0  # every process has loaded its model by then (~3 s here with imports)
    env = {**os.environ, "LEMON_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", model, str(n), str(seed0 + 100 * p),
                               str(start_at)], env=env, stdout=subprocess.PIPE, text=True)
             for p in range(processes)]
    results = [json.loads(p.communicate()[0]) for p in procs]
    return sum(r["tokens"] / r["wall"] for r in results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="a model of the model registry")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=3, help="requests per process and round")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        model, n, seed0, start_at = args.worker
        print(json.dumps(asyncio.run(_decode(model, int(n), int(seed0), float(start_at)))))
        return
    one, two = [], []
    for k in range(args.rounds):
        one.append(_side(args.model, 1, 2, args.requests, 1000 * k))
        two.append(_side(args.model, 2, 1, args.requests, 1000 * k))
    print(f"P8 {max(two) / max(one):.2f}  completion tok/s 2 processes x 1 thread {max(two):.1f} / 1 process x 2 "
          f"threads {max(one):.1f}, {args.model}; > 1 means JOBS=2 THREADS=1 draws the bank faster")


if __name__ == "__main__":
    run_script(main)
