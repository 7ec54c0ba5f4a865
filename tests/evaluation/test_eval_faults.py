"""Evaluations over a hostile endpoint and under caps: every item completes (bad replies are error rows, counted
and shown), `lemon eval` exits 3 when items ended in error and 4 when --budget-tokens-total left items out,
non-positive limits are one-line usage errors, and the whole-run cap holds."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from lemon.benchmarks.registry import load_split
from lemon.evaluation.evaluate import (
    EXIT_BUDGET_SPENT,
    EXIT_ITEMS_IN_ERROR,
    default_split,
    exit_status,
    summary_lines,
)
from lemon.evaluation.item import EvalSettings
from lemon.evaluation.methods import resolve_method
from lemon.evaluation.store import ResultsStore
from lemon.llm.base import GenParams
from lemon.llm.openai_compat import OpenAIBackend
from lemon.llm.pool import Pool
from tests.evalcall import evaluate_kw
from tests.llm.servers import WRONG_SHAPES, Fault, completion, fault_server, huge_completion
from tests.pools import LEVELS, scripted_pool
from tests.runtime.test_budget import BillingBackend


def _items(data_dir: Path, n: int) -> list:  # type: ignore[type-arg]
    return list(load_split("multiarith", default_split("multiarith"), data_dir=data_dir))[:n]


def _router(data_dir: Path, n: int, faults: dict[int, Callable[[int], Fault]]) -> Callable[[dict, int], Fault]:
    """Per request: the fault of the item whose question the prompt holds (called with how many times that item
    was asked before), else a correct answer."""
    items = _items(data_dir, n)
    seen: dict[int, int] = {}
    lock = threading.Lock()

    def pick(body: dict, _n: int) -> Fault:
        text = "\n".join(m["content"] for m in body["messages"])
        for i, item in enumerate(items):
            if item.question in text:
                with lock:
                    k = seen[i] = seen.get(i, -1) + 1
                if i in faults:
                    return faults[i](k)
                return Fault(200, completion(f"The answer is {item.answer}."))
        return Fault(200, completion("I do not know."))

    return pick


def _endpoint_pool(base: str) -> Pool:
    backend = OpenAIBackend(base, "m", max_retries=1, backoff_s=0.01, timeout_s=0.5)
    return scripted_pool(backend, concurrency=8, name="fault", defaults=GenParams(max_tokens=32))


def _faults(items: list) -> dict[int, Callable[[int], Fault]]:  # type: ignore[type-arg]
    """Items 0-5 each meet one fault; item 6 gets a 429 with Retry-After first, then its answer."""
    answer_6 = Fault(200, completion(f"The answer is {items[6].answer}."))
    return {
        0: lambda k: Fault(200, WRONG_SHAPES["content_list"]),
        1: lambda k: Fault(200, WRONG_SHAPES["usage_nan"]),
        2: lambda k: Fault(200, WRONG_SHAPES["usage_negative"]),
        3: lambda k: Fault(200, completion("late"), delay_s=30),  # hangs
        4: lambda k: Fault(200, huge_completion(16 * 1024 * 1024)),
        5: lambda k: Fault(200, WRONG_SHAPES["missing_choices"]),
        6: lambda k: Fault(429, b"{}", (("Retry-After", "1"),)) if k == 0 else answer_6,
    }


async def test_an_eval_over_a_faulty_endpoint_completes_every_item_and_counts_errors(
        tmp_path: Path, data_dir: Path) -> None:
    items = _items(data_dir, 10)
    with fault_server(_router(data_dir, 10, _faults(items))) as ep:
        summary = await evaluate_kw("multiarith", "vanilla", limit=10, concurrency=4, store=tmp_path / "r.sqlite",
                                    data_dir=data_dir, pool="fault", level="small", temperature=0.0,
                                    pool_factory=lambda: _endpoint_pool(ep.base_url))
    assert summary.computed == 10 and summary.in_error == 6
    assert summary.stats.accuracy_mean == pytest.approx(0.4)  # items 6..9 answered right, 429 item included
    assert exit_status(summary) == EXIT_ITEMS_IN_ERROR
    with ResultsStore(tmp_path / "r.sqlite") as db:
        rows = {r.item_id: r for r in db.items(summary.run_id)}
    reasons = {i: rows[str(items[i].id)].stop_reason or "" for i in range(6)}
    assert "content" in reasons[0] and "malformed" in reasons[0]
    assert "prompt_tokens" in reasons[1] and "completion_tokens" in reasons[2]
    assert "timed out" in reasons[3] and "larger than" in reasons[4] and "choices" in reasons[5]
    assert all(r.total_tokens >= 0 for r in rows.values())  # no negative cost reaches the store
    lines = "\n".join(summary_lines(summary))
    assert "6 of 10 (item, seed) pairs ended in error" in lines and "most common error" in lines


_ONE_SOLVER = json.dumps({"agents": [{"name": "solver", "role": "math_solver", "capacity": "small"}],
                          "output": "solver"})


def _prompted_router(items: list, orchestrator: Callable[[int], Fault]) -> Callable[[dict, int], Fault]:  # type: ignore[type-arg]
    """Item i's orchestrator call (the request with a response_format) gets `orchestrator(i)`; its workers
    answer right."""
    def pick(body: dict, n: int) -> Fault:
        text = "\n".join(m["content"] for m in body["messages"])
        i = next(i for i, item in enumerate(items) if item.question in text)
        if "response_format" in body:
            return orchestrator(i)
        return Fault(200, completion(f"The answer is {items[i].answer}."))
    return pick


async def test_a_prompted_eval_survives_an_orchestrator_reply_of_the_wrong_shape(tmp_path: Path,
                                                                                 data_dir: Path) -> None:
    items = _items(data_dir, 4)

    def orchestrator(i: int) -> Fault:
        bad = {0: "content_list", 1: "usage_negative"}.get(i)
        return Fault(200, WRONG_SHAPES[bad] if bad else completion(_ONE_SOLVER))

    with fault_server(_prompted_router(items, orchestrator)) as ep:
        summary = await evaluate_kw("multiarith", "prompted", limit=4, store=tmp_path / "r.sqlite", data_dir=data_dir,
                                    pool="fault", level="small",
                                    pool_factory=lambda: _endpoint_pool(ep.base_url))
    assert summary.computed == 4 and summary.in_error == 2 and summary.stats.accuracy_mean == 0.5
    with ResultsStore(tmp_path / "r.sqlite") as db:
        errors = [r for r in db.items(summary.run_id) if r.status == "error"]
    assert all((r.stop_reason or "").startswith("orchestrator: ") for r in errors)


async def test_an_eval_whose_orchestrator_wrote_unusable_specs_says_what_share(tmp_path: Path,
                                                                               data_dir: Path) -> None:
    """A policy's unusable output runs the fallback in its place (the six-benchmark SFT policy on MMLU: 28 of
    60), so the accuracy partly measures the fallback: the summary counts the specs by source and says so."""
    items = _items(data_dir, 4)
    no_spec_for_two = _prompted_router(items, lambda i: Fault(200, completion("I would rather not." if i < 2
                                                                            else _ONE_SOLVER)))
    with fault_server(no_spec_for_two) as ep:
        summary = await evaluate_kw("multiarith", "prompted", limit=4, store=tmp_path / "r.sqlite", data_dir=data_dir,
                                    pool="fault", level="small", pool_factory=lambda: _endpoint_pool(ep.base_url))
    assert summary.in_error == 0 and summary.stats.spec_sources == {"fallback": 2, "model": 2}
    with ResultsStore(tmp_path / "r.sqlite") as db:
        teams = {item: [a["role"] for a in top["agents"]] for (item, _), top in db.topologies(summary.run_id).items()}
    # the template's number team (five prose, five program voters, the learned vote), not a solver + critic
    fallback_team = ["math_solver"] * 5 + ["program_solver"] * 5 + ["majority_vote"]
    assert sorted(teams.values()) == [["math_solver"]] * 2 + [fallback_team] * 2
    lines = "\n".join(summary_lines(summary))
    assert "50 % of specs unusable (the fallback ran)" in lines and "repaired" not in lines


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "lemon.cli.main", *args]


def test_lemon_eval_exits_3_and_says_how_many_items_ended_in_error(tmp_path: Path, data_dir: Path,
                                                                   _isolated_home: Path) -> None:
    faults = _faults(_items(data_dir, 7))
    router = _router(data_dir, 6, {0: faults[0], 2: faults[2]})
    with fault_server(router) as ep:
        pool = tmp_path / "pool.yaml"
        levels = "\n".join(f"  - {{name: {n}, backend: openai, model: m, base_url: '{ep.base_url}', "
                           "max_retries: 0, timeout_s: 5, concurrency: 4}" for n in LEVELS)
        pool.write_text(f"name: faulty\ndefaults: {{max_tokens: 32}}\nlevels:\n{levels}\n")
        done = subprocess.run(_cli("eval", "multiarith", "-m", "vanilla", "--pool", str(pool), "--limit", "6",
                                   "--level", "small", "--store", str(tmp_path / "r.sqlite"), "--data-dir",
                                   str(data_dir), "--temperature", "0", "--no-cache"),
                              env=_env(_isolated_home), capture_output=True, text=True, timeout=300)
    assert done.returncode == EXIT_ITEMS_IN_ERROR, done.stderr[-2000:]
    assert "2 of 6 (item, seed) pairs ended in error" in done.stdout
    assert "accuracy 66.67%" in done.stdout and "Traceback" not in done.stderr


def _env(home: Path) -> dict[str, str]:
    import os

    return {**os.environ, "LEMON_HOME": str(home), "COLUMNS": "200"}


@pytest.mark.parametrize(("args", "needle"), [
    (("eval", "multiarith", "-m", "vanilla", "--max-tokens", "0"), "--max-tokens must be a positive integer"),
    (("eval", "multiarith", "-m", "vanilla", "--max-tokens", "-1"), "--max-tokens must be a positive integer"),
    (("eval", "multiarith", "-m", "vanilla", "--budget-tokens", "0"), "--budget-tokens must be a positive"),
    (("eval", "multiarith", "-m", "vanilla", "--budget-tokens-total", "-5"), "--budget-tokens-total must be"),
    (("eval", "multiarith", "-m", "vanilla", "--timeout", "0"), "--timeout must be a positive number"),
    (("eval", "multiarith", "-m", "vanilla", "--timeout", "nan"), "--timeout must be a positive number"),
    (("eval", "multiarith", "-m", "vanilla", "--budget-tokens-total", "9", "--shard", "0/2"), "cannot be combined"),
    (("run", "2+2?", "--max-tokens", "0"), "--max-tokens must be a positive integer"),
    (("run", "2+2?", "--budget-tokens", "0"), "--budget-tokens must be a positive integer"),
    (("exec", "spec.yaml", "2+2?", "--max-tokens", "-1"), "--max-tokens must be a positive integer"),
    (("exec", "spec.yaml", "2+2?", "--timeout", "0"), "--timeout must be a positive number"),
])
def test_non_positive_limits_are_usage_errors(args: tuple[str, ...], needle: str, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from lemon.cli.main import main

    monkeypatch.setattr(sys, "argv", ["lemon", *args])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code == 2 and needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_negative_max_tokens_in_a_pool_file_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from lemon.cli.main import main

    pool = tmp_path / "pool.yaml"
    pool.write_text("name: p\ndefaults: {max_tokens: -1}\nlevels:\n  - {name: small, backend: scripted, "
                    "model: s}\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("agents:\n  - {name: a, role: generalist, capacity: small}\noutput: a\n")
    monkeypatch.setattr(sys, "argv", ["lemon", "exec", str(spec), "2+2?", "--pool", str(pool)])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    # the pool file's own validation names the file and the field, in one line
    assert info.value.code == 2 and "max_tokens" in err and str(pool) in err and len(err.strip().splitlines()) == 1


# ---- the whole-run cap ---------------------------------------------------------------------------------------


def _billing_pool(backend: BillingBackend) -> Pool:
    return scripted_pool(backend, concurrency=8, name="billing",  # type: ignore[arg-type]
                         defaults=GenParams(max_tokens=48))


async def test_the_whole_run_cap_holds_and_a_larger_one_resumes_the_same_run(tmp_path: Path,
                                                                            data_dir: Path) -> None:
    common = dict(limit=8, concurrency=3, store=tmp_path / "r.sqlite", data_dir=data_dir, pool="billing",
                  level="small", method="sc-cot", temperature=0.7)  # sampled: no two calls alike
    probe = BillingBackend(default_words=30)
    free = await evaluate_kw("multiarith", store=tmp_path / "probe.sqlite",  # what the 8 items cost uncapped
                             **{k: v for k, v in common.items() if k != "store"},  # type: ignore[arg-type]
                             pool_factory=lambda: _billing_pool(probe))
    cap = probe.billed // 3
    backend = BillingBackend(default_words=30, latency_s=0.005)
    capped = await evaluate_kw("multiarith", **common, budget_tokens_total=cap,  # type: ignore[arg-type]
                               pool_factory=lambda: _billing_pool(backend))
    assert backend.billed <= cap and capped.eval_tokens is not None and capped.eval_tokens <= cap
    assert 1 <= capped.computed < 8 and capped.computed + capped.not_computed == 8
    assert exit_status(capped) == EXIT_BUDGET_SPENT and capped.in_error == 0
    with ResultsStore(tmp_path / "r.sqlite") as db:
        rows = db.items(capped.run_id)
        assert db.run(capped.run_id).config["budget_tokens_total"] == cap  # type: ignore[union-attr]
    assert len(rows) == capped.computed and all(r.status == "ok" for r in rows)  # no item cut by the cap stored
    assert all(r.params.max_tokens == 48 for r in backend.requests)  # the cap refused calls, never shortened one
    more = await evaluate_kw("multiarith", **common, budget_tokens_total=10 * probe.billed,  # type: ignore[arg-type]
                             pool_factory=lambda: _billing_pool(backend))
    assert more.run_id == capped.run_id and more.skipped == capped.computed and more.not_computed == 0
    assert exit_status(more) == 0 and more.stats.tokens_mean == free.stats.tokens_mean


async def test_the_whole_run_cap_covers_the_orchestrator(tmp_path: Path, data_dir: Path) -> None:
    spec = json.dumps({"agents": [{"name": "solver", "role": "math_solver", "capacity": "small"}],
                       "output": "solver"})

    class SpecWriter(BillingBackend):
        async def complete(self, request):  # type: ignore[no-untyped-def]
            out = await super().complete(request)
            return out if request.json_schema is None else type(out)(spec, out.prompt_tokens, out.completion_tokens,
                                                                      0.0, out.model)

    common = dict(limit=6, concurrency=2, data_dir=data_dir, pool="billing", level="small")
    probe = SpecWriter(default_words=200)
    free = await evaluate_kw("multiarith", "prompted", store=tmp_path / "probe.sqlite",  # type: ignore[arg-type]
                             **common, pool_factory=lambda: _billing_pool(probe))
    assert free.stats.orchestrator_tokens_mean > 0 and free.not_computed == 0
    from lemon.benchmarks.registry import BENCHMARKS
    from lemon.orchestrator.prompted import PromptedOrchestrator
    from lemon.spec.roles import RoleLibrary

    writer = PromptedOrchestrator(_billing_pool(probe), RoleLibrary.load())
    worst = writer.token_bound(BENCHMARKS["multiarith"].prompt(_items(data_dir, 1)[0]))
    cap = worst + 900  # the orchestrator's worst case (its bytes bound: ~5x its real cost) and a bit more
    assert cap < probe.billed
    backend = SpecWriter(default_words=200)
    summary = await evaluate_kw("multiarith", "prompted", store=tmp_path / "r.sqlite",  # type: ignore[arg-type]
                                budget_tokens_total=cap, **common, pool_factory=lambda: _billing_pool(backend))
    assert sum(r.json_schema is not None for r in backend.requests) >= 1  # the orchestrator ran, and was billed
    assert backend.billed <= cap and summary.eval_tokens == backend.billed  # ... and counted
    assert 1 <= summary.computed < 6 and exit_status(summary) == EXIT_BUDGET_SPENT


def test_run_ids_change_only_for_budgeted_runs() -> None:
    plain = EvalSettings("multiarith", resolve_method("vanilla"), "small", "cpu").identity()
    assert "budget_rule" not in plain  # unbudgeted runs keep the ids they were stored under
    budgeted = EvalSettings("multiarith", resolve_method("vanilla"), "small", "cpu", budget_tokens=500).identity()
    assert budgeted["budget_rule"] == "reserve"


def test_the_exit_codes_are_documented_in_the_cli_help() -> None:
    from lemon.cli.bench_cmds import eval_cmd

    doc = " ".join((eval_cmd.__doc__ or "").split())
    assert "3 some items ended in error" in doc and "4 --budget-tokens-total ran out" in doc
