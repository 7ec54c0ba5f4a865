"""What running a program voter's code costs, beside the model call that wrote it (issue 24's program voters).

PG1  median wall time of running one stored program reply in the sandbox (`lemon.runtime.programs.run_reply`),
     serial, over the program voters of a stored run (real model-written programs)
PG2  those sandbox seconds over the same items' stored latency (model calls + programs): the share of a program
     voter's time that is the sandbox, target <= 0.05 (the latencies are the run's own: pass a run whose
     voters were computed live, not answered from the LLM cache, or the ratio means nothing)

Run: `python benchmarks/bench_programs.py --run RUN_ID [--store S] [--n 40]` (a `pot` or `pot-esc` run, e.g. from
`experiments/adaptive_cpu.sh programs`). One line per measure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from lemon.errors import run_script
from lemon.evaluation.store import ResultsStore
from lemon.paths import lemon_home
from lemon.runtime.programs import program_code, run_reply


def stored_programs(store: ResultsStore, run_id: str, n: int) -> tuple[list[str], float]:
    """The first `n` program voters' replies of `run_id` and the summed latency of the items they came from."""
    rows = store.items(run_id)
    traces = store.traces(run_id, [(r.item_id, r.seed) for r in rows])
    replies: list[str] = []
    latency = 0.0
    for row in rows:
        contents = traces[(row.item_id, row.seed)].contents
        found = [text for text in contents.values() if program_code(text) is not None]
        if not found:
            continue
        replies += found
        latency += row.latency_s
        if len(replies) >= n:
            break
    return replies[:n], latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a stored pot or pot-esc run id")
    parser.add_argument("--store", type=Path, default=lemon_home() / "adaptive-cpu.sqlite")
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args()
    with ResultsStore(args.store) as store:
        replies, latency = stored_programs(store, args.run, args.n)
    if not replies:
        raise SystemExit(f"run {args.run} holds no program voter's reply")
    times = []
    for reply in replies:
        start = time.perf_counter()
        asyncio.run(run_reply(reply))
        times.append(time.perf_counter() - start)
    print(f"PG1 {statistics.median(times) * 1000:.0f} ms per program (median of {len(times)}, serial)")
    print(f"PG2 {sum(times) / latency:.3f} sandbox time / stored item latency, target <= 0.05")


if __name__ == "__main__":
    run_script(main)
