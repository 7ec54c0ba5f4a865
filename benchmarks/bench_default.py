"""D1: wall time per item of the default orchestration (`template`) against ONE chain-of-thought agent on the
pool's strongest level, the best single agent of the `cpu` pool (docs/results.md, "The default orchestration").

Issue 11 allows the default at most 3x the best single agent's wall time. The accuracy runs of
`experiments/default_cpu.sh` cannot show it: there the template's first voter makes exactly the request of the
`cot` agent, so the LLM request cache serves it. Here both methods run on the same items with the cache OFF,
one item at a time (`--concurrency 1`, what one `lemon run` costs), in fresh stores, back to back in one
process, so each item's wall time is what a new user pays. Real models (the `cpu` pool), real runtime and store.

Prints `D1 <ratio>  default wall / best single agent wall per item (median over items), target <= 3.0`, then
`D1.mean` with the ratio of means; per-method numbers are logged.
Run: `python benchmarks/bench_default.py [--items 10] [--data-dir DIR]` (about 12 min on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
from pathlib import Path

import lemon
from lemon.evaluation.store import ResultsStore

log = logging.getLogger("bench_default")

TARGET = 3.0
STRONGEST = "large"  # the cpu pool's strongest level (Qwen2.5-Coder-1.5B)


async def wall_per_item(method: str, *, items: int, data_dir: str | None, store: Path) -> dict[str, float]:
    """Per-item wall seconds of `method` on the first `items` MultiArith test items, seed 0, cache off."""
    level = None if method == "template" else STRONGEST  # the template chooses its levels (the strongest)
    summary = await lemon.aevaluate("multiarith", method, limit=items, pool="cpu", level=level, max_tokens=256,
                                    cache=False, store=store, data_dir=data_dir, concurrency=1)
    with ResultsStore(store) as db:
        rows = db.items(summary.run_id)
    log.info("%s: %d items, accuracy %.1f%%, %.0f worker tokens/item", method, len(rows),
             100 * sum(r.correct for r in rows) / len(rows), statistics.fmean(r.total_tokens for r in rows))
    return {r.item_id: r.latency_s for r in rows}


async def main(items: int, data_dir: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        single = await wall_per_item("cot", items=items, data_dir=data_dir, store=Path(tmp) / "cot.sqlite")
        default = await wall_per_item("template", items=items, data_dir=data_dir,
                                      store=Path(tmp) / "template.sqlite")
    shared = sorted(set(single) & set(default))
    ratios = [default[k] / single[k] for k in shared]
    log.info("wall s/item: cot@%s %.1f, template %.1f (means over %d items)", STRONGEST,
             statistics.fmean(single[k] for k in shared), statistics.fmean(default[k] for k in shared), len(shared))
    mean_ratio = statistics.fmean(default[k] for k in shared) / statistics.fmean(single[k] for k in shared)
    print(f"D1 {statistics.median(ratios):.2f}  default wall / best single agent wall per item "
          f"(median over {len(shared)} items), target <= {TARGET}")
    print(f"D1.mean {mean_ratio:.2f}  ratio of the mean wall times, target <= {TARGET}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    asyncio.run(main(args.items, args.data_dir))
