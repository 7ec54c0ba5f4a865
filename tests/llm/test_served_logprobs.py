"""A logprob gate on a served pool: `lemon serve`'s llama-server gives each reply's token log-probabilities with
the reply, so the gate runs there with no scoring pass and no second model, and takes exactly the voter its rule
takes on those scores; a pool whose server gives none (llama_cpp.server) is refused in one line before any call.

llama-server and llama-cpp-python reach the logits by different code, and even greedy replies part within a few
tokens (seen here: at the 6th and the 25th token), so a llama-server run and an embedded run never share draws.
`lemon serve --engine embedded` serves the embedded backend itself (`lemon.llm.embedded_server`): there the
served pool's draws ARE the embedded levels' draws, and the last test shows it end to end (issue 54): the same
teams (a gate `{agree: 2, logprob: T}` and a learned rule `{learned: number}`) on the same seeds, once on the
embedded `tiny` pool and once through `lemon serve`, each with a fresh LLM cache, give the same replies, the
same log-probabilities and the same stop decisions."""

from __future__ import annotations

import asyncio
import math
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from lemon.extract import extract_number
from lemon.llm.base import can_score
from lemon.llm.pools import load_pool, read_pool_config
from lemon.llm.serve import serving
from lemon.runtime import Executor, RunResult
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.roles import RoleLibrary
from tests.llm.servers import built_llama_server, free_port, lemon_serve

pytestmark = [pytest.mark.models, pytest.mark.server]

TASK = "Tom has 3 apples and buys 4 more. How many apples does he have?"


def gate_team(threshold: int) -> Spec:
    voters = tuple(Agent(name=f"v{i}", role="math_solver", duty=f"Solve it, way {i}.", capacity="small")
                   for i in range(3))
    vote = Agent(name="vote", role="majority_vote", capacity="small", depends_on=tuple(v.name for v in voters),
                 stop=StopRule(logprob=threshold))
    return Spec(agents=(*voters, vote), output="vote")


async def _run(pool_ref: str, spec: Spec) -> object:
    pool = load_pool(pool_ref, cache=False)
    try:
        executor = Executor(pool, RoleLibrary.load(), params=pool.params(temperature=0.7, max_tokens=40))
        return await executor.run(spec, TASK, seed=3)
    finally:
        await pool.aclose()


def test_the_gate_reads_the_served_log_probabilities_and_takes_the_voter_its_rule_takes(
        tmp_path: Path, _isolated_home: Path) -> None:
    with serving("tiny", tmp_path / "w", port=free_port(), binary=built_llama_server()) as pool_file:
        assert all(lv.logprobs for lv in read_pool_config(str(pool_file)).levels)
        assert can_score(load_pool(str(pool_file), cache=False).backend("small"))
        probe = asyncio.run(_run(str(pool_file), gate_team(-1)))  # no reply is that sure: all run, all scored
        scores = probe.early_stops[0]["scores"]  # type: ignore[attr-defined]
        assert set(scores) == {"v0", "v1", "v2"} and all(math.isfinite(s) and s < 0 for s in scores.values())
        threshold = math.floor(max(scores.values()))  # the surest voter passes; who passes first is the rule's
        gated = asyncio.run(_run(str(pool_file), gate_team(threshold)))
        sure = next(v for v in ("v0", "v1", "v2") if scores[v] >= threshold)
        stop = gated.early_stops[0]  # type: ignore[attr-defined]
        assert stop["sure"] == sure and stop["ran"] == ["v0", "v1", "v2"][:int(sure[1]) + 1]
        assert gated.outputs[sure] == probe.outputs[sure]  # type: ignore[attr-defined]


def test_a_server_without_log_probabilities_is_refused_before_any_call(tmp_path: Path,
                                                                       _isolated_home: Path) -> None:
    with serving("tiny", tmp_path / "w", port=free_port()) as pool_file:  # llama_cpp.server: none
        result = asyncio.run(_run(str(pool_file), gate_team(-20)))
    assert result.status == "error" and result.calls == 0  # type: ignore[attr-defined]
    assert "gives none" in result.stop_reason and "\n" not in result.stop_reason  # type: ignore[attr-defined]


# ---- the embedded engine: the served pool's draws are the embedded levels' draws (issue 54) ------------------

SEEDS = (3, 11)
REPLY_TOKENS = 32


def voters(n: int) -> tuple[Agent, ...]:
    """Voters with distinct duties, so no two requests share a prompt (see `test_same_draws...`'s docstring)."""
    return tuple(Agent(name=f"v{i}", role="math_solver", duty=f"Solve it, way {i}.", capacity="small")
                 for i in range(n))


def team(rule: StopRule, n: int) -> Spec:
    vote = Agent(name="vote", role="majority_vote", capacity="small", depends_on=tuple(f"v{i}" for i in range(n)),
                 stop=rule)
    return Spec(agents=(*voters(n), vote), output="vote")


def gate_with(threshold: int) -> Spec:
    return team(StopRule(agree=2, logprob=threshold), 3)


LEARNED = team(StopRule(learned="number"), 4)


def what_it_did(result: RunResult) -> dict[str, Any]:
    """A run as the comparison sees it, from its trace: each voter's reply and log-probability (its `return`
    event), and the vote's `stop` event (what ran, what the gate scored and took, the learned rule's decisions)."""
    events: list[dict[str, Any]] = [dict(e) for e in result.trace.events]
    logprobs = {e["agent"]: e.get("logprob") for e in events if e["type"] == "return" and e["agent"] != "vote"}
    stops = [{k: v for k, v in e.items() if k not in ("id", "t")} for e in events
             if e["type"] == "stop" and e.get("reason") == "stop_rule"]
    return {"outputs": dict(result.outputs), "logprobs": logprobs, "stops": stops, "status": result.status,
            "answer": result.answer}


async def _teams(pool_ref: str, cache: Path, plan: list[tuple[str, Spec, int]]) -> dict[str, dict[str, Any]]:
    """Each (name, spec, seed) of `plan` run in order on one pool over a fresh LLM cache file."""
    assert not cache.exists()
    pool = load_pool(pool_ref, cache=True, cache_path=cache)
    try:
        executor = Executor(pool, RoleLibrary.load(), params=pool.params(temperature=0.7, max_tokens=REPLY_TOKENS))
        return {name: what_it_did(await executor.run(spec, TASK, seed=seed, vote_key=extract_number))
                for name, spec, seed in plan}
    finally:
        await pool.aclose()


def _plan(thresholds: dict[int, int]) -> list[tuple[str, Spec, int]]:
    return [item for seed in SEEDS for item in (
        (f"probe-{seed}", gate_with(-1), seed), (f"gate-{seed}", gate_with(thresholds[seed]), seed),
        (f"learned-{seed}", LEARNED, seed))]


def _same_run(embedded: dict[str, Any], served: dict[str, Any]) -> None:
    """Equal, log-probabilities included, with no tolerance: the same code computes them from the same logits,
    their per-token values cross JSON losslessly (Python writes a float's shortest exact form) and the client
    sums them in the order `SampledLogprobs` does."""
    assert served["outputs"] == embedded["outputs"]
    assert served["logprobs"] == embedded["logprobs"] and None not in embedded["logprobs"].values()
    assert served["stops"] == embedded["stops"]  # ran, skipped, fired, the gate's scores and sure voter, the
    assert len(embedded["stops"]) == 1           # learned rule's decisions with their probabilities
    assert (served["status"], served["answer"]) == (embedded["status"], embedded["answer"])


def test_same_draws_and_decisions_served_by_the_embedded_engine_as_embedded(
        tmp_path: Path, _isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Why distinct duties: llama-cpp-python re-evaluates a prompt's last token alone when the request before it
    had exactly the same prompt (its KV-cache prefix reuse), which changes the logits in their last bits and so,
    now and then, a draw; concurrent requests with one prompt would then draw by arrival order, in process as
    served. With distinct prompts the draws do not depend on the order requests arrive in (measured)."""
    monkeypatch.setenv("LEMON_THREADS", "1")  # the embedded levels' threads, as `--threads 1` gives the server
    probes = asyncio.run(_teams("tiny", tmp_path / "embedded-probe.sqlite",
                                [(f"probe-{s}", gate_with(-1), s) for s in SEEDS]))
    thresholds = {s: math.floor(max(v for v in probes[f"probe-{s}"]["stops"][0]["scores"].values()))
                  for s in SEEDS}  # the surest reply passes: the gate takes a voter, on both sides
    embedded = asyncio.run(_teams("tiny", tmp_path / "embedded.sqlite", _plan(thresholds)))

    args = ["--pool", "tiny", "--engine", "embedded", "--port", str(free_port()), "--out", str(tmp_path / "served"),
            "--threads", "1"]
    with lemon_serve(args, dict(os.environ)) as (proc, lines):
        assert any("embedded backend" in line for line in lines), lines
        pool_file = str(tmp_path / "served" / "pool.yaml")
        assert {(lv.backend, lv.logprobs) for lv in read_pool_config(pool_file).levels} == {("openai", True)}
        served = asyncio.run(_teams(pool_file, tmp_path / "served.sqlite", _plan(thresholds)))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0

    assert served.keys() == embedded.keys()
    for name in embedded:
        _same_run(embedded[name], served[name])
    assert all(embedded[f"gate-{s}"]["stops"][0]["sure"] for s in SEEDS)  # the gate did take a voter
    assert all(embedded[f"learned-{s}"]["stops"][0]["decisions"] for s in SEEDS)
