"""One explicit seed is one complete seed (issue 23 leftover): `lemon eval --seed S` alone recorded S+1
requested seeds, so the report called a finished run partial."""

from __future__ import annotations

from pathlib import Path

from lemon.evaluation.report import run_stats
from lemon.evaluation.store import ResultsStore
from tests.evalcall import evaluate_kw

from .conftest import CountingBackend, eval_pool


def _run(store: Path, run_id: str):  # type: ignore[no-untyped-def]
    with ResultsStore(store) as db:
        run = db.run(run_id)
        assert run is not None
        return run, run_stats(run, db.items(run_id))


async def test_seed_s_alone_is_one_complete_seed_and_later_seeds_add_to_it(tmp_path: Path, data_dir: Path) -> None:
    store = tmp_path / "r.sqlite"
    backend = CountingBackend("b", responder=lambda r: "The answer is 3.")
    common = dict(limit=3, store=store, data_dir=data_dir, pool="p", level="small",
                  pool_factory=lambda: eval_pool(backend))
    first = await evaluate_kw("multiarith", "vanilla", seeds=1, first_seed=2, **common)  # type: ignore[arg-type]
    run, stats = _run(store, first.run_id)
    assert (run.seeds, stats.seeds, stats.rows) == (1, (2,), 3)
    assert stats.complete
    more = await evaluate_kw("multiarith", "vanilla", seeds=2, **common)  # type: ignore[arg-type]  # 0, 1 join 2
    run, stats = _run(store, more.run_id)
    assert more.run_id == first.run_id and (run.seeds, stats.seeds, stats.rows) == (3, (0, 1, 2), 9)
    assert stats.complete
    again = await evaluate_kw("multiarith", "vanilla", seeds=1, first_seed=1, **common)  # type: ignore[arg-type]
    assert again.computed == 0 and _run(store, again.run_id)[0].seeds == 3


def test_a_run_stored_before_the_seed_table_keeps_its_seeds(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as db:
        db.ensure_run("old", benchmark="gsm8k", split="test", method="cot", pool="tiny", level="medium", seeds=2,
                      n_items=1, config={})
        db._exec("DELETE FROM run_seeds WHERE run_id = 'old'")  # as a store written before run_seeds existed
        run = db.ensure_run("old", benchmark="gsm8k", split="test", method="cot", pool="tiny", level="medium",
                            seeds=[5], n_items=1, config={})
        assert run.seeds == 3  # 0, 1 and 5
        assert db.delete_run("old") == 0 and not db._exec("SELECT 1 FROM run_seeds").fetchone()
