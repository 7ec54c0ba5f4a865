"""Real models through llama-cpp-python: SmolLM2 generation and the three-model `cpu` pool on a 3-agent spec."""

from __future__ import annotations

import json

import pytest

from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.embedded import EmbeddedBackend
from lemon.llm.pools import load_pool
from lemon.runtime import Executor
from lemon.spec.model import Agent, Spec
from lemon.spec.roles import RoleLibrary

pytestmark = pytest.mark.models


async def test_smollm2_generates_deterministically_and_follows_a_schema() -> None:
    backend = EmbeddedBackend("smollm2-135m")
    try:
        req = ChatRequest((Message("user", "What is the capital of France? Answer in one word."),),
                          GenParams(max_tokens=16))
        a = await backend.complete(req)
        b = await backend.complete(req)
        assert a.text.strip() and a.text == b.text
        assert a.prompt_tokens > 5 and 0 < a.completion_tokens <= 16
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                  "required": ["city"]}
        c = await backend.complete(ChatRequest(req.messages, GenParams(max_tokens=40), json_schema=schema))
        assert isinstance(json.loads(c.text)["city"], str)
    finally:
        await backend.aclose()


async def test_cpu_pool_runs_a_three_agent_spec_on_three_models() -> None:
    spec = Spec(agents=(
        Agent(name="facts", role="analyst", duty="List the numbers in the question.", capacity="small"),
        Agent(name="solver", role="math_solver", capacity="medium", depends_on=("facts",)),
        Agent(name="final", role="final_decision_maker", capacity="large", depends_on=("facts", "solver")),
    ), output="final")
    pool = load_pool("cpu", cache=False)
    try:
        ex = Executor(pool, RoleLibrary.load(), params=GenParams(max_tokens=48))
        result = await ex.run(spec, "Tom has 3 apples and buys 4 more. How many apples does he have?")
    finally:
        await pool.aclose()
    assert result.status == "ok" and result.answer.strip()
    assert set(result.tokens_by_level) == {"small", "medium", "large"}
    assert all(v > 0 for v in result.tokens_by_level.values())
    models = {t["model"] for t in result.tokens_by_agent.values()}
    assert len(models) == 3  # three different real models answered
