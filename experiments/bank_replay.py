"""The six-benchmark cells replayed from the committed sample bank: a fingerprint that a refactor must not move.

Why: a change to how kinds, stop rules or baselines are wired (issue 53) must not change any measured number. The
numbers of the six-benchmark table come from worker requests (their cache keys: `llm.base.request_key`), the vote
keys, the stop rules' decisions and the graders. This script imports `experiments/bank/cpu.jsonl.gz` into a fresh
LLM cache, runs each banked method's cell through the real evaluation unit of work (`evaluation.item.run_item`) on
the OFFLINE `cpu` pool (no model call; a request the bank lacks is an error row, which is part of the fingerprint
too), and prints one JSON line per (benchmark, method, item, seed): the prediction, whether it is right, tokens,
the status, the agents run and each stop rule's decision. Run it before and after a change and diff the outputs
(`--out` writes them to a file); identical output means every replayed number is unchanged.
Usage: LEMON_DATA_DIR=../shared/data python experiments/bank_replay.py [--limit 4] [--seeds 2] [--out F]
       [--benchmarks ...] [--methods ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.errors import run_script
from lemon.evaluation.baselines import supports
from lemon.evaluation.item import EvalSettings, build_context, run_item
from lemon.evaluation.methods import resolve_method
from lemon.files import write_output
from lemon.llm.cache import SQLiteCache
from lemon.llm.cache_file import import_cache
from lemon.llm.pools import load_pool

BANK = Path(__file__).parent / "bank" / "cpu.jsonl.gz"
BENCHMARKS = ("multiarith", "svamp", "gsm8k", "aqua", "mmlu", "humaneval")
#: The cells the bank answers: the banked voters' teams (the table's baselines and the default template).
METHODS = ("cot", "sc-cot", "esc", "asc", "gate", "exsc", "pot", "sc-pot", "pot-esc", "mixed-esc", "template")
log = logging.getLogger("bank_replay")


async def cell(benchmark: str, method: str, cache: Path, limit: int, seeds: int) -> list[dict[str, object]]:
    """Every (item, seed) row of one cell, replayed offline, as a fingerprint record."""
    from lemon.benchmarks.base import reply_tokens

    bench = get_benchmark(benchmark)
    settings = EvalSettings(benchmark=benchmark, method=resolve_method(method), level="large", pool="cpu",
                            max_tokens=reply_tokens(bench))
    ctx = build_context(settings, lambda: load_pool("cpu", cache_path=cache, offline=True))
    rows = []
    try:
        for item in load_split(benchmark, bench.default_split)[:limit]:
            for seed in range(seeds):
                row = await run_item(ctx, item, seed)
                trace = json.loads(row.trace_json) if row.trace_json else {}
                stops = (trace.get("metrics") or {}).get("early_stops") or []
                rows.append({"benchmark": benchmark, "method": method, "item": row.item_id, "seed": seed,
                             "status": row.status, "prediction": row.prediction, "correct": row.correct,
                             "tokens": row.total_tokens, "agents": sorted(row.tokens),
                             "stop_reason": row.stop_reason if row.status != "ok" else "",
                             "stops": [{k: s.get(k) for k in ("agent", "rule", "fired", "ran", "sure", "scores")}
                                       for s in stops]})
    finally:
        await ctx.aclose()
    return rows


def cells(benchmarks: list[str], methods: list[str]) -> Iterator[tuple[str, str]]:
    """The (benchmark, method) pairs that exist (a baseline only for the answer kinds it supports)."""
    for b in benchmarks:
        kind = get_benchmark(b).kind
        for m in methods:
            if m == "template" or supports(m, kind):
                yield b, m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--benchmarks", nargs="+", default=list(BENCHMARKS))
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--bank", type=Path, default=BANK)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "bank.sqlite"
        import_cache(SQLiteCache(cache), args.bank)
        for benchmark, method in cells(args.benchmarks, args.methods):
            rows = asyncio.run(cell(benchmark, method, cache, args.limit, args.seeds))
            lines += [json.dumps(r, sort_keys=True) for r in rows]
            ok = sum(r["status"] == "ok" for r in rows)
            log.warning("%s %s: %d rows, %d ok, %d right", benchmark, method, len(rows), ok,
                        sum(bool(r["correct"]) for r in rows))
    text = "\n".join(lines) + "\n"
    if args.out:
        write_output(args.out, text, what="the replayed rows", fix="pass --out another path")
    else:
        print(text, end="")


if __name__ == "__main__":
    run_script(main)
