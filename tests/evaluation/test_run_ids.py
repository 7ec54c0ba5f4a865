"""Stored runs are found again by their id: the ids below were computed by the code before the Method and
unit-of-work refactor (issue 14), so a store written then still resumes without recomputing anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.evaluation.evaluate import run_id_of
from lemon.evaluation.item import EvalSettings
from lemon.evaluation.methods import resolve_method
from lemon.evaluation.store import ResultsStore
from lemon.llm.base import GenParams
from lemon.llm.pool import Pool
from lemon.llm.scripted import ScriptedBackend
from tests.evalcall import evaluate_kw
from tests.pools import scripted_pool

# (settings keywords, split, limit) -> the run id the code of 6f6adde computed for them, re-pinned on 2026-11-24
# (WORKER_SEEDS moved to role ranks, a deliberate change of every run id: old runs are never resumed into), and
# the prompted and trained ids on 2026-11-27, when unusable output began to run the template's team instead of
# fallback.yaml's solver and critic (`fallback_identity`: their runs under the old fallback are not resumed into),
# and the template, prompted and trained ids again on 2026-11-28, when a code task with runnable examples got
# exsc's team (`code`) and one without them `code_unchecked` (the teams moved, so the template's identity did, and
# the fallback's with it), and again on 2026-11-29 (issue 55, on purpose) when the number team became the learned
# stop rule over five prose and five program voters, with `number_unchecked` for a machine without a sandbox (was
# 10b11f56c87a5b97, 9e9565c3b82225aa and, for the trained policy, 1e642e6094a6be9e).
PINNED = [
    (dict(benchmark="multiarith", method="vanilla", level="small", pool="cpu"), "test", None, "91b48e27304c0e1d"),
    (dict(benchmark="gsm8k", method="cot", level="medium", pool="tiny", budget_tokens=500), "test", 50,
     "7ab0527c978390bd"),
    (dict(benchmark="aqua", method="sc-cot", level="large", pool="cpu", temperature=0.0, n_agents=3,
          max_tokens=256, call_timeout_s=30.0), "test", 10, "da571540175a689a"),
    (dict(benchmark="humaneval", method="template", level="medium", pool="cpu"), "test", 5, "b128343218c060d4"),
    (dict(benchmark="svamp", method="prompted", level="medium", pool="pool.yaml"), "test", 5, "e41b19bcacdfaf1b"),
    # moved on 2026-11-29 on purpose: a trained policy now decodes under the spec grammar, which its identity names,
    # so a run written by the unconstrained policy is never resumed by the constrained one (was 5d18b7decb8f1313),
    # and again with the fallback's number team (issue 55, was 1e642e6094a6be9e), and again when the grammar's
    # Lark text took -10 and -100 as logprob gates (digits one lexeme each; was 53ee37f6861b7684), and again when a
    # policy came to be named by `policy_identity` (its tokenizer and prompt style count too, and a policy card
    # names the same policy as its weights: issue 53's trained row replayed from the bank; was 58ce02a52e8e9884),
    # and again when the choice kind's learned stop rule was packaged (issue 54: the grammar lists the packaged
    # policies, `learned: choice` among them; was 4f8f0250d5a6487d)
    (dict(benchmark="gsm8k", method="trained:policy", level="small", pool="tiny"), "test", 3, "9834631a7416622c"),
]


@pytest.fixture
def in_files_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with the pool file and policy the pinned ids were computed with (relative paths)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pool.yaml").write_text("name: mine\n")
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "config.json").write_text('{"model_type": "qwen2"}')
    (tmp_path / "policy" / "model.safetensors").write_bytes(b"weights-v1")
    return tmp_path


@pytest.mark.parametrize(("kw", "split", "limit", "expected"), PINNED)
def test_run_ids_did_not_move(in_files_dir: Path, kw: dict[str, object], split: str, limit: int | None,
                              expected: str) -> None:
    settings = EvalSettings(**{**kw, "method": resolve_method(str(kw["method"]))})  # type: ignore[arg-type]
    assert run_id_of(settings, split, limit) == expected


def _reply(request: object) -> str:
    params = request.params  # type: ignore[attr-defined]
    return f"seed {params.seed} The answer is {(params.seed or 0) % 97}."


def _pool() -> Pool:
    return scripted_pool(ScriptedBackend("s", responder=_reply), concurrency=8, defaults=GenParams(max_tokens=64))


# method -> (run id, predictions of items 1..3 x seeds 0..1 in (item, seed) order), from the code of 6f6adde,
# re-pinned on 2026-11-24 when worker seeds moved from agent names to role ranks (WORKER_SEEDS, so every run id
# moved too). The predictions are the worker seeds mod 97: they pin the per-item sampling seeds and, for random,
# its graph. vanilla, sc-cot and the template share their first math solver's sample (the sample bank): with
# three different answers sc-cot's vote goes to that first voter, and so does the template's stop-rule vote
# (agree 2 of 3: no two of its three agree; with 5 voters, before 2026-11-24 evening, a fifth agreed and item 1,
# seed 1 answered 82). The template's identity hashes its teams (as data, not the file's comments): its run id
# moves with a team, and so does the humaneval template id above, re-pinned then too, and again on 2026-11-27
# when the choice team became agree 2 of 3 on the strongest model, and on 2026-11-28 when the code teams moved
# (the predictions, number items, did not move), and on 2026-11-29 when the number team became the learned rule
# (issue 55; was 30022f495aff89e2): its program voters find no program in these replies and the policy runs
# other voters than agree 2 of 3 did; item 1, seed 1 answers 82 (as the 5-voter team's did).
END_TO_END = {
    "vanilla": ("e32d0d9d915ec696", None, ["73", "42", "73", "30", "25", "22"]),
    "random": ("36e04b4eb16e23de", 3, ["82", "6", "57", "34", "87", "3"]),
    "sc-cot": ("2db6c8044cd07156", 3, ["73", "42", "73", "30", "25", "22"]),
    "template": ("79f3e865171a9af1", None, ["73", "82", "73", "30", "25", "22"]),
}


@pytest.mark.parametrize("method", list(END_TO_END))
async def test_an_evaluation_lands_in_the_run_it_landed_in_before(tmp_path: Path, data_dir: Path,
                                                                 method: str) -> None:
    run_id, n_agents, predictions = END_TO_END[method]
    summary = await evaluate_kw("multiarith", method, limit=3, seeds=2, pool="scripted", level="small",
                                n_agents=n_agents, store=tmp_path / "r.sqlite", data_dir=data_dir,
                                pool_factory=_pool)
    assert summary.run_id == run_id and summary.computed == 6
    with ResultsStore(tmp_path / "r.sqlite") as db:
        rows = sorted(db.items(run_id), key=lambda r: (r.item_id, r.seed))
    assert [r.prediction for r in rows] == predictions
