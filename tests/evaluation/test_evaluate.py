"""evaluate(): rows per (item, seed), resume after a crash, bounded concurrency, seeds as replicates."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.benchmarks.registry import load_split
from lemon.errors import BackendError, LemonError
from lemon.evaluation.evaluate import default_split
from lemon.evaluation.item import EvalSettings
from lemon.evaluation.methods import resolve_method
from lemon.evaluation.store import ResultsStore
from lemon.llm.base import ChatRequest
from tests.evalcall import evaluate_kw

from .conftest import CountingBackend, Crash, crashing_after, eval_pool, oracle_responder


def _items(data_dir: Path, n: int) -> list:  # type: ignore[type-arg]
    return list(load_split("multiarith", default_split("multiarith"), data_dir=data_dir))[:n]


def _answers(data_dir: Path, n: int) -> dict[str, str]:
    return {item.question: str(item.answer) for item in _items(data_dir, n)}


async def test_rows_traces_accuracy_and_concurrency_bound(tmp_path: Path, data_dir: Path) -> None:
    backend = CountingBackend("oracle", latency_s=0.02, responder=oracle_responder(_answers(data_dir, 6)))
    store = tmp_path / "r.sqlite"
    summary = await evaluate_kw("multiarith", "vanilla", limit=6, seeds=2, concurrency=3, store=store,
                                data_dir=data_dir, pool="scripted-oracle", level="small",
                                pool_factory=lambda: eval_pool(backend))
    assert summary.computed == 12 and summary.skipped == 0 and summary.split == default_split("multiarith")
    assert summary.stats.accuracy_mean == 1.0 and summary.stats.accuracy_std == 0.0
    assert backend.max_in_flight == 3  # the semaphore is the bound, and it is used
    with ResultsStore(store) as db:
        run = db.run(summary.run_id)
        rows = db.items(summary.run_id)
        db_traces = {(r.item_id, r.seed): db.trace(summary.run_id, r.item_id, r.seed) for r in rows}
    assert run is not None and (run.split, run.n_items, run.seeds) == (summary.split, 6, 2)
    assert run.config["worker_seeds"] == "per-item-role-rank"  # the seeding scheme is part of the run's identity
    assert sorted((r.item_id, r.seed) for r in rows) == sorted(
        (str(i.id), s) for s in range(2) for i in _items(data_dir, 6))
    for r in rows:
        assert r.correct is True and r.status == "ok" and r.total_tokens > 0 and "solver" in r.tokens
        trace = db_traces[(r.item_id, r.seed)]
        assert trace is not None and trace.trace_id == r.trace_id and trace.events
        assert trace.task_id == r.item_id  # e.g. "multiarith/3", the id `lemon trace` takes
    # same command again: nothing recomputed
    again = await evaluate_kw("multiarith", "vanilla", limit=6, seeds=2, concurrency=3, store=store,
                              data_dir=data_dir, pool="scripted-oracle", level="small",
                              pool_factory=lambda: eval_pool(backend))
    assert (again.run_id, again.computed, again.skipped) == (summary.run_id, 0, 12)


async def test_crash_then_resume_counts_every_item_once(tmp_path: Path, data_dir: Path) -> None:
    store = tmp_path / "r.sqlite"
    common = dict(limit=5, seeds=2, store=store, data_dir=data_dir, pool="scripted", level="small", concurrency=1)
    with pytest.raises(Crash):
        await evaluate_kw("multiarith", "vanilla", **common,  # type: ignore[arg-type]
                          pool_factory=lambda: eval_pool(crashing_after(4)))
    with ResultsStore(store) as db:
        (run,) = db.runs()
        assert db.count(run.run_id) == 4
    summary = await evaluate_kw("multiarith", "vanilla", **common,  # type: ignore[arg-type]
                                pool_factory=lambda: eval_pool(crashing_after(10_000)))
    assert summary.run_id == run.run_id and summary.skipped == 4 and summary.computed == 6
    with ResultsStore(store) as db:
        keys = [(r.item_id, r.seed) for r in db.items(run.run_id)]
    assert len(keys) == len(set(keys)) == 10


async def test_shards_fill_one_run_exactly_once(tmp_path: Path, data_dir: Path) -> None:
    backend = CountingBackend("b", responder=lambda r: "The answer is 3.")
    kw = dict(limit=5, seeds=2, store=tmp_path / "r.sqlite", data_dir=data_dir, pool="p", level="small",
              pool_factory=lambda: eval_pool(backend))
    first = await evaluate_kw("multiarith", "cot", shard=(0, 3), **kw)  # type: ignore[arg-type]
    second = await evaluate_kw("multiarith", "cot", shard=(1, 3), **kw)  # type: ignore[arg-type]
    assert first.run_id == second.run_id and (first.computed, second.computed) == (4, 3)
    rest = await evaluate_kw("multiarith", "cot", **kw)  # type: ignore[arg-type]
    assert (rest.computed, rest.skipped) == (3, 7)
    with ResultsStore(tmp_path / "r.sqlite") as db:
        keys = [(r.item_id, r.seed) for r in db.items(first.run_id)]
    assert len(keys) == len(set(keys)) == 10 and len(backend.calls) == 10


async def test_more_seeds_extend_the_same_run(tmp_path: Path, data_dir: Path) -> None:
    backend = CountingBackend("b", responder=lambda r: "The answer is 3.")
    kw = dict(limit=3, store=tmp_path / "r.sqlite", data_dir=data_dir, pool="p", level="small",
              pool_factory=lambda: eval_pool(backend))
    one = await evaluate_kw("multiarith", "cot", seeds=1, **kw)  # type: ignore[arg-type]
    three = await evaluate_kw("multiarith", "cot", seeds=3, **kw)  # type: ignore[arg-type]
    assert one.run_id == three.run_id and three.skipped == 3 and three.computed == 6
    assert len(three.stats.seeds) == 3


async def test_seeds_are_sampled_replicates_and_temperature_zero_is_greedy(tmp_path: Path,
                                                                         data_dir: Path) -> None:
    sampled = CountingBackend("b", responder=lambda r: "The answer is 3.")
    await evaluate_kw("multiarith", "vanilla", limit=1, seeds=2, store=tmp_path / "a.sqlite", data_dir=data_dir,
                      pool="p", level="small", pool_factory=lambda: eval_pool(sampled))
    params = [c.params for c in sampled.calls]
    assert all(p.temperature == 0.7 for p in params)
    assert len({p.seed for p in params}) == 2 and None not in {p.seed for p in params}
    # different items of one seed must not share a sampling stream (that couples the items' outcomes)
    many = CountingBackend("b", responder=lambda r: "The answer is 3.")
    await evaluate_kw("multiarith", "vanilla", limit=5, seeds=1, store=tmp_path / "c.sqlite", data_dir=data_dir,
                      pool="p", level="small", pool_factory=lambda: eval_pool(many))
    assert len({c.params.seed for c in many.calls}) == 5
    greedy = CountingBackend("b", responder=lambda r: "The answer is 3.")
    await evaluate_kw("multiarith", "vanilla", limit=1, seeds=1, temperature=0.0, store=tmp_path / "b.sqlite",
                      data_dir=data_dir, pool="p", level="small",
                      pool_factory=lambda: eval_pool(greedy))
    assert [c.params.temperature for c in greedy.calls] == [0.0]


async def test_sc_cot_runs_five_samples_and_a_vote(tmp_path: Path, data_dir: Path) -> None:
    backend = CountingBackend("oracle", responder=oracle_responder(_answers(data_dir, 2)))
    summary = await evaluate_kw("multiarith", "sc-cot", limit=2, store=tmp_path / "r.sqlite", data_dir=data_dir,
                                pool="p", level="small",
                                pool_factory=lambda: eval_pool(backend))
    assert len(backend.calls) == 10  # 5 samples per item; the vote makes no model call
    assert summary.stats.accuracy_mean == 1.0
    # the five samples of one item differ in their sampling seed (else the vote is over copies)
    prompts: dict[str, set[int | None]] = {}
    for call in backend.calls:
        prompts.setdefault(call.messages[-1].content, set()).add(call.params.seed)
    assert all(len(seeds) == 5 for seeds in prompts.values())


async def test_bad_names_list_the_valid_ones(tmp_path: Path, data_dir: Path) -> None:
    kw = dict(store=tmp_path / "r.sqlite", data_dir=data_dir)
    with pytest.raises(LemonError, match=r"valid: .*gsm8k.*multiarith"):
        await evaluate_kw("gsm9k", "vanilla", **kw)  # type: ignore[arg-type]
    valid = (r"valid: vanilla, cot, sc-cot, esc, asc, gate, cges, exsc, pot, sc-pot, pot-esc, mixed-esc, "
             r"cross-check, chain, tree, complete, random")
    with pytest.raises(LemonError, match=valid):
        await evaluate_kw("gsm8k", "magic", **kw)  # type: ignore[arg-type]
    with pytest.raises(LemonError):
        await evaluate_kw("gsm8k", "vanilla", split="nope", **kw)  # type: ignore[arg-type]
    with pytest.raises(LemonError, match="does not exist"):
        await evaluate_kw("gsm8k", "trained:/nonexistent", limit=1, pool="p",  # type: ignore[arg-type]
                          level="small", pool_factory=lambda: eval_pool(CountingBackend("b")), **kw)
    with pytest.raises(LemonError, match="level"):
        await evaluate_kw("gsm8k", "vanilla", limit=1, pool="p", level="huge",  # type: ignore[arg-type]
                          pool_factory=lambda: eval_pool(CountingBackend("b")), **kw)


async def test_broken_backend_fails_fast(tmp_path: Path, data_dir: Path) -> None:
    def refuse(request: ChatRequest) -> str:
        raise BackendError("endpoint http://127.0.0.1:9 refused the connection; start the server")

    with pytest.raises(LemonError, match="re-run the same command"):
        await evaluate_kw("multiarith", "vanilla", limit=12, store=tmp_path / "r.sqlite", data_dir=data_dir,
                          pool="p", level="small",
                          pool_factory=lambda: eval_pool(CountingBackend("b", responder=refuse)))


def test_a_trained_policy_is_identified_by_its_weights_not_its_path(tmp_path: Path) -> None:
    model = tmp_path / "final"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights v1")
    (model / "tokenizer.json").write_text("{}")
    first = resolve_method(f"trained:{model}").identity()
    assert first is not None and first.startswith("policy:")
    assert resolve_method(f"trained:{tmp_path}").identity() == first  # a run directory resolves to its final/ model
    (model / "notes.json").write_text('{"a card": "or a note"}')
    assert resolve_method(f"trained:{model}").identity() == first  # only what decides its output counts
    (model / "tokenizer.json").write_text('{"changed": 1}')  # another tokenizer asks it other tokens
    second = resolve_method(f"trained:{model}").identity()
    assert second != first
    (model / "model.safetensors").write_bytes(b"weights v2")  # lemon train rewrote final/ in place
    assert resolve_method(f"trained:{model}").identity() not in (first, second)
    assert resolve_method("cot").identity() is None  # baseline run ids are unchanged
    trained = resolve_method(f"trained:{model}")
    settings = EvalSettings(benchmark="gsm8k", method=trained, level="small", pool="tiny")
    assert settings.identity()["policy"] == trained.identity()
    cot = EvalSettings(benchmark="gsm8k", method=resolve_method("cot"), level="small", pool="tiny")
    assert "policy" not in cot.identity()


@pytest.mark.parametrize(("max_tokens", "recorded"), [(None, 200), (100, 100)])
async def test_a_pool_files_reply_limit_is_recorded_so_its_cut_replies_are_counted(
        tmp_path: Path, data_dir: Path, max_tokens: int | None, recorded: int) -> None:
    """A pool file's default reply limit is not part of a run's identity (None: "the pool's default"): the run
    records it, so the report counts that run's cut replies instead of printing "?"."""
    pool_file = tmp_path / "mine.yaml"
    pool_file.write_text("name: mine\ndefaults: {temperature: 0.7, max_tokens: 200}\n"
                         "levels:\n  - {name: small, backend: embedded, model: smollm2-135m}\n")
    backend = CountingBackend("oracle", responder=oracle_responder(_answers(data_dir, 2)))
    summary = await evaluate_kw("multiarith", "vanilla", limit=2, seeds=1, store=tmp_path / "r.sqlite",
                                data_dir=data_dir, pool=str(pool_file), level="small", max_tokens=max_tokens,
                                pool_factory=lambda: eval_pool(backend))
    with ResultsStore(tmp_path / "r.sqlite") as db:
        run = db.run(summary.run_id)
    assert run is not None and run.config["reply_limit"] == recorded
    assert (summary.stats.reply_limit, summary.stats.replies, summary.stats.replies_at_limit) == (recorded, 2, 0)
