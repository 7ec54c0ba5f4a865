"""`--ray`: each (item, seed) runs as a Ray actor call; the driver stores each result as it arrives."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import ray

from lemon.evaluation.store import ResultsStore
from tests.evalcall import evaluate_kw


@pytest.fixture
def local_ray():  # type: ignore[no-untyped-def]
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_eval_matches_local_eval(local_ray, tmp_path: Path, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    def pool_factory():  # type: ignore[no-untyped-def]
        # Built inside each Ray worker (pools are not picklable); this closure is pickled by value.
        from lemon.llm.base import GenParams
        from lemon.llm.pool import Level, Pool
        from lemon.llm.scripted import ScriptedBackend

        backend = ScriptedBackend("scripted", latency_s=0.05, responder=lambda r: "The answer is 5.")
        return Pool("scripted", tuple(Level(n, backend, 8) for n in ("small", "medium", "large")),
                    GenParams(max_tokens=32))

    kw = dict(limit=6, seeds=2, pool="scripted-ray", level="small", data_dir=data_dir,
              pool_factory=pool_factory, concurrency=4)
    remote = asyncio.run(evaluate_kw("multiarith", "cot", store=tmp_path / "ray.sqlite", ray_address="local",
                                     **kw))  # type: ignore[arg-type]
    local = asyncio.run(evaluate_kw("multiarith", "cot", store=tmp_path / "local.sqlite", **kw))  # type: ignore[arg-type]
    assert remote.run_id == local.run_id and remote.computed == local.computed == 12
    with ResultsStore(tmp_path / "ray.sqlite") as a, ResultsStore(tmp_path / "local.sqlite") as b:
        ra = {(r.item_id, r.seed): (r.prediction, r.correct, r.total_tokens) for r in a.items(remote.run_id)}
        rb = {(r.item_id, r.seed): (r.prediction, r.correct, r.total_tokens) for r in b.items(local.run_id)}
    assert ra == rb and len(ra) == 12
    # resume through Ray: nothing left to do
    again = asyncio.run(evaluate_kw("multiarith", "cot", store=tmp_path / "ray.sqlite", ray_address="local",
                                    **kw))  # type: ignore[arg-type]
    assert again.computed == 0 and again.skipped == 12
