"""The embedded engine (`lemon.llm.embedded_server`, `lemon serve --engine embedded`) as the official `openai`
client meets it: a reply and its token log-probabilities are the embedded backend's own on the same request, and
a request the engine would not honour as asked is a 400 before any model loads (never silently ignored)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest
from aiohttp import web

from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.embedded import EmbeddedBackend
from lemon.llm.embedded_server import embedded_app
from tests.llm.servers import free_port

ALIAS = "smollm2-135m-embedded"
HI = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}]


@asynccontextmanager
async def engine(backend: EmbeddedBackend) -> AsyncIterator[openai.AsyncOpenAI]:
    """The engine's application on a free port of 127.0.0.1, and a client that does not retry."""
    runner = web.AppRunner(embedded_app(backend, ALIAS))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


@pytest.mark.parametrize("bad", [
    {"top_k": 5}, {"frequency_penalty": 0.5}, {"logit_bias": {"1": 2}}, {"stream": True},
    {"logprobs": True, "top_logprobs": 2}, {"seed": -1}, {"temperature": "hot"}, {"max_tokens": 0},
    {"stop": ["a", "b", "c", "d", "e"]}, {"response_format": {"type": "json_schema", "json_schema": {}}},
    {"model": "gpt-4o"}, {"messages": [{"role": "robot", "content": "hi"}]},
], ids=["top_k", "frequency_penalty", "logit_bias", "stream", "top_2", "seed", "temperature", "max_tokens",
        "stops", "json_schema", "model", "role"])
async def test_what_the_engine_would_not_honour_is_a_400_before_the_model_loads(bad: dict[str, Any]) -> None:
    backend = EmbeddedBackend("smollm2-135m")
    async with engine(backend) as client:
        extra = {k: bad.pop(k) for k in ("top_k", "model", "messages") if k in bad}  # not the SDK's arguments
        body = {"model": extra.pop("model", ALIAS), "messages": extra.pop("messages", HI), **bad}
        with pytest.raises(openai.APIStatusError) as err:
            await client.chat.completions.create(**body, extra_body=extra)
        assert err.value.status_code in (400, 404) and err.value.body is not None
    assert backend._llama is None  # nothing reached the model


@pytest.mark.models
async def test_a_reply_and_its_token_logprobs_are_the_embedded_backend_s(_isolated_home: object) -> None:
    served, local = EmbeddedBackend("smollm2-135m", n_threads=1), EmbeddedBackend("smollm2-135m", n_threads=1)
    request = ChatRequest(tuple(Message(m["role"], m["content"]) for m in HI),  # type: ignore[arg-type]
                          GenParams(temperature=0.8, max_tokens=24, seed=5, repeat_penalty=1.0))
    try:
        async with engine(served) as client:
            reply = await client.chat.completions.create(
                model=ALIAS, messages=HI, temperature=0.8, max_tokens=24, seed=5, logprobs=True,  # type: ignore[arg-type]
                top_logprobs=1, extra_body={"repeat_penalty": 1.0})
            plain = await client.chat.completions.create(model=ALIAS, messages=HI, temperature=0.8,  # type: ignore[arg-type]
                                                         max_tokens=24, seed=5)
        expected = await local.complete(request)
    finally:
        await local.aclose()
    tokens = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    assert reply.choices[0].message.content == plain.choices[0].message.content == expected.text
    assert "".join(t.token for t in tokens) == expected.text and len(tokens) == reply.usage.completion_tokens  # type: ignore[union-attr]
    assert expected.logprob is not None and math.fsum(t.logprob for t in tokens) == pytest.approx(expected.logprob,
                                                                                                 abs=1e-9)
    assert all(len(t.top_logprobs) == 1 and t.top_logprobs[0].logprob >= t.logprob for t in tokens)
    assert reply.usage.prompt_tokens == expected.prompt_tokens  # type: ignore[union-attr]
