"""Sandbox cost per HumanEval check (S1) and for all 164 canonical solutions on W workers (S2).

S1  median wall time of one check (two bubblewrap sandboxes: candidate + tests), serial, over the first N items
S2  wall time of all 164 canonical solutions with W worker threads (the CI test does this with W=2)

Run: `python benchmarks/bench_sandbox.py [--data-dir DIR] [--n 40] [--workers 2]`. One line per measure.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from lemon.benchmarks.humaneval import run_humaneval
from lemon.benchmarks.registry import load_split
from lemon.errors import run_script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    items = load_split("humaneval", "all", args.data_dir)
    times = []
    for item in items[: args.n]:
        start = time.perf_counter()
        assert run_humaneval(item.meta["canonical_solution"], item, timeout_s=30.0).passed, item.id
        times.append(time.perf_counter() - start)
    print(f"S1 {statistics.median(times) * 1000:.0f} ms per check (median of {len(times)}, serial)")
    start = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool:
        results = list(pool.map(lambda it: run_humaneval(it.meta["canonical_solution"], it, timeout_s=30.0), items))
    passed = sum(r.passed for r in results)
    print(f"S2 {time.perf_counter() - start:.1f} s for {len(items)} canonical solutions on {args.workers} workers "
          f"({passed} passed)")


if __name__ == "__main__":
    run_script(main)
