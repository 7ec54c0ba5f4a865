"""P9: what a logprob gate costs once each reply's log-probability is read from the generation itself.

P9  wall time of a gate team (N CoT voters and a vote with `stop: {logprob: -1}`, a gate no reply passes, so
    every voter runs and every reply is scored) over the same voters' generation alone (the same team without
    the gate, on the same embedded model with the log-probability recorder off), both run by the Executor from
    the same model state (reset first), same seeds, same texts (checked). Target <= 1.02: before, each score
    was a second teacher-forced pass on a second copy of the model, 7-25 s against ~20 s per generation.

P9c the same ratio in CPU time of the process (on a shared machine, wall time also measures the neighbours).

Run: `python benchmarks/bench_gate.py [--pool tiny|cpu] [--level small|large] [--voters 3] [--rounds 3]`. One
line per measure, starting with its id; the median over rounds (in each round the two sides alternate, so a
busy machine slows both alike).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from lemon.errors import LemonError, run_script
from lemon.llm.embedded import EmbeddedBackend
from lemon.llm.pools import load_pool
from lemon.runtime import Executor, RunResult
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.roles import RoleLibrary

TASK = ("A baker made 24 muffins in the morning and 18 in the afternoon. She sold 30 of them. "
        "How many muffins are left? Think step by step.")


def team(voters: int, level: str, rule: StopRule | None) -> Spec:
    cot = tuple(Agent(name=f"cot_{i + 1}", role="math_solver", capacity=level) for i in range(voters))
    vote = Agent(name="vote", role="majority_vote", capacity=level, depends_on=tuple(a.name for a in cot), stop=rule)
    return Spec(agents=(*cot, vote), output="vote")


async def timed(executor: Executor, backend: EmbeddedBackend, spec: Spec, seed: int,
                read_logprobs: bool) -> tuple[tuple[float, float], RunResult]:
    """(wall seconds, this process's CPU seconds) of one run, and the run."""
    backend.read_logprobs = read_logprobs
    backend._load().reset()  # both sides start from the same model state (no prompt in its KV cache)
    start, cpu = time.perf_counter(), time.process_time()
    result = await executor.run(spec, TASK, seed=seed)
    return (time.perf_counter() - start, time.process_time() - cpu), result


async def one_round(pool_name: str, level: str, voters: int, seed: int) -> tuple[float, float, float, float]:
    pool = load_pool(pool_name, cache=False)  # every call generates: nothing answered from the LLM cache
    backend = pool.backend(level)
    if not isinstance(backend, EmbeddedBackend):
        raise LemonError(f"level {level!r} of pool {pool_name!r} is not embedded; P9 measures the embedded backend")
    executor = Executor(pool, RoleLibrary.load(), params=pool.params(temperature=0.7, max_tokens=192))
    try:
        await backend.prepare()
        alone_s, alone = await timed(executor, backend, team(voters, level, None), seed, False)
        gate_s, gated = await timed(executor, backend, team(voters, level, StopRule(logprob=-1)), seed, True)
        if gated.status != "ok" or len(gated.early_stops[0]["ran"]) != voters:
            raise LemonError(f"the gate team did not run every voter: {gated.stop_reason}")
        if any(gated.outputs[a] != alone.outputs[a] for a in alone.outputs if a != "vote"):
            raise LemonError("the recorder changed a sampled text: the bank would not replay")
        return gate_s[0], alone_s[0], gate_s[1], alone_s[1]
    finally:
        await pool.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pool", default="tiny")
    ap.add_argument("--level", default="small")
    ap.add_argument("--voters", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = [asyncio.run(one_round(args.pool, args.level, args.voters, seed)) for seed in range(args.rounds)]
    ratios = [(r[0] / r[1], r[2] / r[3]) for r in rows]
    print(f"P9 {statistics.median(x[0] for x in ratios):.3f}  gate team over the voters' generation alone, wall "
          f"time ({args.voters} voters, {args.pool}/{args.level}, median of {args.rounds} rounds: "
          f"{' '.join(f'{x[0]:.3f}' for x in ratios)})")
    print(f"P9c {statistics.median(x[1] for x in ratios):.3f}  the same in this process's CPU time, which other "
          f"processes on the machine do not inflate ({' '.join(f'{x[1]:.3f}' for x in ratios)})")


if __name__ == "__main__":
    run_script(main)
