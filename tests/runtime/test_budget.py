"""Budgets that cap: with a backend that honours max_tokens, the tokens billed never exceed the budget (calls
are reserved and clipped before they are sent), parallel and cut-off calls are all counted, and a shared
(evaluation) ledger only refuses calls, never shortens one."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lemon.errors import BackendError, LemonError
from lemon.llm.base import ChatRequest, Completion, GenParams, Message
from lemon.llm.pool import Pool
from lemon.runtime import Budget, Executor, NodeCache
from lemon.runtime.budget import BudgetExhausted, TokenLedger, prompt_token_bound
from lemon.spec.model import Agent, Spec
from lemon.spec.roles import RoleLibrary
from tests.pools import scripted_pool

ROLES = RoleLibrary.load()


class BillingBackend:
    """TEST DOUBLE of a paid endpoint that HONOURS max_tokens: it bills prompt + min(reply, max_tokens) tokens
    (whitespace words) the moment a request arrives, whether or not the caller waits for the answer."""

    def __init__(self, words: dict[str, int] | None = None, *, default_words: int = 40, latency_s: float = 0.0,
                 fail_on: str | None = None) -> None:
        self.words = words or {}
        self.default_words = default_words
        self.latency_s = latency_s
        self.fail_on = fail_on  # a request whose system prompt contains this fails after 10 ms
        self.billed = 0
        self.requests: list[ChatRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def model_id(self) -> str:
        return "billing"

    async def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        system = request.messages[0].content
        n = next((w for key, w in self.words.items() if key in system), self.default_words)
        prompt = sum(len(m.content.split()) for m in request.messages)
        completion = min(n, request.params.max_tokens)
        self.billed += prompt + completion
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.fail_on is not None and self.fail_on in system:
                await asyncio.sleep(0.01)
                raise BackendError("endpoint failed on this one")
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1
        return Completion(" ".join(["w"] * completion), prompt, completion, self.latency_s, self.model_id)

    async def prepare(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


def pool(backend: BillingBackend, concurrency: int = 16) -> Pool:
    return scripted_pool(backend, concurrency=concurrency, name="billing")  # type: ignore[arg-type]


def fan_out(width: int) -> Spec:
    workers = tuple(Agent(name=f"w{i}", role="generalist", duty=f"Angle {i}.", capacity="small")
                    for i in range(width))
    agg = Agent(name="agg", role="generalist", duty="Combine.", capacity="large",
                depends_on=tuple(w.name for w in workers))
    return Spec(agents=(*workers, agg), output="agg")


def single() -> Spec:
    return Spec(agents=(Agent(name="solo", role="generalist", duty="Solve.", capacity="small"),), output="solo")


def call_bound(ex: Executor, spec: Spec, agent: str) -> int:
    """The prompt bound of `agent`'s request when it has no parents."""
    a = spec.agent(agent)
    return prompt_token_bound(ex.messages(a, "task", {}, spec))


async def test_one_call_is_clipped_to_what_the_budget_leaves_instead_of_overshooting() -> None:
    backend = BillingBackend(default_words=500)
    ex = Executor(pool(backend), ROLES, params=GenParams(max_tokens=400))
    budget = call_bound(ex, single(), "solo") + 50
    ex.budget = Budget(max_tokens=budget)
    result = await ex.run(single(), "task")
    assert backend.requests[0].params.max_tokens == 50  # was 400: one call overshot the budget 4.9x
    assert backend.billed <= budget
    assert result.status == "ok" and result.charged_tokens == backend.billed


async def test_six_parallel_agents_under_a_budget_of_20_bill_nothing_over_20() -> None:
    backend = BillingBackend(default_words=10, latency_s=0.01)
    result = await Executor(pool(backend), ROLES, budget=Budget(max_tokens=20),
                            params=GenParams(max_tokens=5)).run(fan_out(6), "task")
    assert backend.billed <= 20 and result.status == "budget_exceeded"
    assert result.budget_scope == "run"  # not "used up": nothing was used, and no call could ever fit (issue 52)
    assert result.stop_reason.startswith("run token budget of 20 is below what one call needs: agent 'w")


async def test_parallel_agents_share_the_budget_and_every_call_is_counted() -> None:
    backend = BillingBackend(default_words=30, latency_s=0.02)
    ex = Executor(pool(backend), ROLES, params=GenParams(max_tokens=60))
    budget = int(2.5 * (call_bound(ex, fan_out(6), "w0") + 60))
    ex.budget = Budget(max_tokens=budget)
    result = await ex.run(fan_out(6), "task")
    assert backend.max_in_flight == 2  # two worst cases fit at once; before, all six were sent together
    assert backend.billed <= budget
    assert result.charged_tokens >= backend.billed  # no call the endpoint billed goes uncounted
    assert result.trace.costs["charged_tokens"] == result.charged_tokens


async def test_calls_cut_off_in_flight_are_still_counted() -> None:
    # One worker fails at once; the other five are in flight (billed) when the run stops and cancels them.
    backend = BillingBackend(default_words=15, latency_s=0.3, fail_on="Angle 0.")
    result = await Executor(pool(backend), ROLES, budget=Budget(max_tokens=100_000),
                            params=GenParams(max_tokens=15)).run(fan_out(6), "task")
    assert result.status == "error" and len(backend.requests) == 6
    assert result.charged_tokens >= backend.billed > result.total_tokens  # before: the run reported only 30 of 90


async def test_a_generous_budget_changes_nothing() -> None:
    spec = fan_out(3)
    free = await Executor(pool(BillingBackend()), ROLES, params=GenParams(max_tokens=64)).run(spec, "task")
    capped = await Executor(pool(BillingBackend()), ROLES, params=GenParams(max_tokens=64),
                            budget=Budget(max_tokens=100_000)).run(spec, "task")
    assert (capped.status, capped.answer, capped.total_tokens) == ("ok", free.answer, free.total_tokens)


async def test_a_shared_ledger_refuses_calls_but_never_clips_them() -> None:
    backend = BillingBackend(default_words=30)
    ex = Executor(pool(backend), ROLES, params=GenParams(max_tokens=60))
    cost = (await ex.run(single(), "task x")).total_tokens
    backend.billed, backend.requests = 0, []
    worst = call_bound(ex, single(), "solo") + 60
    shared = TokenLedger(2 * cost + worst - 1, "eval")  # room for two runs, not for a third's worst case
    results = [await ex.run(single(), f"task {i}", shared_budget=shared) for i in range(4)]
    assert [r.status for r in results] == ["ok", "ok", "budget_exceeded", "budget_exceeded"]
    assert results[2].budget_scope == "eval" and shared.refused
    assert all(r.params.max_tokens == 60 for r in backend.requests)  # the shared cap never shortened a call
    assert backend.billed <= shared.cap and shared.used == backend.billed


async def test_a_clipped_answer_is_never_served_from_the_node_cache_to_a_richer_run() -> None:
    backend = BillingBackend(default_words=500)
    cache = NodeCache()
    ex = Executor(pool(backend), ROLES, params=GenParams(max_tokens=400), node_cache=cache)
    ex.budget = Budget(max_tokens=call_bound(ex, single(), "solo") + 50)
    poor = await ex.run(single(), "task")
    ex.budget = Budget()
    rich = await ex.run(single(), "task")
    assert poor.tokens_by_agent["solo"]["completion"] == 50
    assert rich.tokens_by_agent["solo"]["completion"] == 400 and rich.cache_hits == 0


def test_budget_values_must_be_positive() -> None:
    for bad in (0, -1):
        with pytest.raises(LemonError, match="positive integer"):
            Budget(max_tokens=bad)
    for bad_t in (0, -1.0, math.nan, math.inf):
        with pytest.raises(LemonError, match="positive number of seconds"):
            Budget(call_timeout_s=bad_t)


async def test_ledger_waits_for_settlements_and_clips_only_when_alone() -> None:
    ledger = TokenLedger(100, "run")
    a = await ledger.reserve(10, 70)
    assert a == 70
    waiting = asyncio.create_task(ledger.reserve(10, 70))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # 30 free, but the holder may give some back: wait instead of clipping
    ledger.settle(70, 20)  # the call used 20 of its 70
    assert await waiting == 70 and ledger.free == 10
    ledger.settle(70, 70)
    assert await ledger.reserve(5, 70) == 10  # alone now: clipped to what is left
    ledger.settle(10, 10)
    with pytest.raises(BudgetExhausted, match="run token budget of 100 used up"):
        await ledger.reserve(1, 5)
    assert ledger.refused and ledger.used == 100


# ---- the invariant, over random budgets and graphs ----------------------------------------------------------


@st.composite
def budgeted_runs(draw: st.DrawFn) -> tuple[Spec, dict[str, int], int, int, float]:
    n = draw(st.integers(1, 6))
    agents = []
    for i in range(n):
        parents = tuple(f"a{j}" for j in range(i) if draw(st.booleans()))
        agents.append(Agent(name=f"a{i}", role="generalist", duty=f"Part {i}.", capacity="small",
                            depends_on=parents))
    spec = Spec(agents=tuple(agents), output=f"a{n - 1}")
    words = {f"Part {i}.": draw(st.integers(1, 300)) for i in range(n)}
    return (spec, words, draw(st.integers(1, 400)), draw(st.integers(1, 8000)),
            draw(st.sampled_from([0.0, 0.001])))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budgeted_runs())
def test_tokens_billed_never_exceed_the_budget(case: tuple[Spec, dict[str, int], int, int, float]) -> None:
    spec, words, max_tokens, budget, latency = case
    backend = BillingBackend(words, latency_s=latency)
    result = asyncio.run(Executor(pool(backend), ROLES, budget=Budget(max_tokens=budget),
                                  params=GenParams(max_tokens=max_tokens)).run(spec, "What is 2 + 3?"))
    assert backend.billed <= budget
    assert result.charged_tokens >= backend.billed
    assert all(1 <= r.params.max_tokens <= max_tokens for r in backend.requests)
    if result.status == "ok":
        assert result.total_tokens == backend.billed == result.charged_tokens
    else:
        assert result.status == "budget_exceeded" and result.budget_scope == "run"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 6), st.integers(200, 6000), st.integers(1, 3))
def test_runs_sharing_one_ledger_never_bill_more_than_its_cap(width: int, cap: int, runs: int) -> None:
    backend = BillingBackend(default_words=40, latency_s=0.001)
    ex = Executor(pool(backend), ROLES, params=GenParams(max_tokens=50))
    shared = TokenLedger(cap, "eval")

    async def all_runs() -> list:  # type: ignore[type-arg]
        return await asyncio.gather(*(ex.run(fan_out(width), f"task {i}", shared_budget=shared)
                                      for i in range(runs)))

    results = asyncio.run(all_runs())
    assert backend.billed <= cap and shared.used >= backend.billed
    assert shared.reserved == 0  # every reservation was settled
    assert all(r.status in ("ok", "budget_exceeded") for r in results)


def test_prompt_bound_covers_the_scripted_count_and_the_template() -> None:
    msgs = (Message("system", "héllo wörld"), Message("user", "a b c"))
    assert prompt_token_bound(msgs) == 64 + (13 + 8) + (5 + 8)
