"""Each benchmark end to end with the REAL `tiny` pool (SmolLM2 from its PyPI package) on 2 items."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lemon.evaluation.store import ResultsStore
from tests.evalcall import evaluate_kw

BENCHMARKS = ("gsm8k", "svamp", "aqua", "multiarith", "mmlu", "humaneval")


@pytest.mark.models
@pytest.mark.parametrize("bench", BENCHMARKS)
def test_vanilla_on_two_items_with_the_tiny_pool(bench: str, tmp_path: Path, data_dir: Path) -> None:
    from lemon.llm.pools import load_pool

    pool = load_pool("tiny", cache=False)
    level = pool.level_names[0]
    asyncio.run(pool.aclose())
    store = tmp_path / "r.sqlite"
    summary = asyncio.run(evaluate_kw(bench, "vanilla", limit=2, seeds=1, pool="tiny", level=level,
                                      concurrency=2, store=store, data_dir=data_dir, cache=False,
                                      max_tokens=96 if bench == "humaneval" else 48))
    assert summary.computed == 2 and summary.n_items == 2
    with ResultsStore(store) as db:
        rows = db.items(summary.run_id)
    assert len(rows) == 2
    for r in rows:
        assert isinstance(r.correct, bool) and r.total_tokens > 0 and r.status
        assert r.tokens and r.gold
