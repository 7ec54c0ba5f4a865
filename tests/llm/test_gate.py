"""`lemon serve`'s gate (`lemon.llm.gate`) as the official `openai` client meets it (issue 52, point 12), in
front of a scripted model server (a TEST DOUBLE of llama-server on 127.0.0.1 that records what reaches it):
what the API answers with 404, 400 or 401 is answered so here, and never reaches the model server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import openai
import pytest
from aiohttp import web

from lemon.llm.gate import Route, run_gate
from tests.llm.servers import free_port

KEY = "sk-test-gate"
HI = [{"role": "user", "content": "2+2?"}]


def _token(text: str, k: int) -> dict:
    alts = [{"token": f"{text}{i}", "logprob": -1.0 - i, "bytes": None} for i in range(k)]
    return {"token": text, "logprob": -0.5, "bytes": list(text.encode()), "top_logprobs": alts}


@dataclass
class Upstream:
    """What the scripted model server got: every request body."""

    url: str = ""
    received: list[dict] = field(default_factory=list)


@asynccontextmanager
async def upstream() -> AsyncIterator[Upstream]:
    """A TEST DOUBLE of llama-server's chat endpoint: 'The answer is 4.' with as many top log-probabilities per
    token as asked for (llama-server's n_probs), or the same as a stream ending in a usage chunk."""
    seen = Upstream()

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.received.append(body)
        k = body.get("top_logprobs", 0) if body.get("logprobs") else 0
        logprobs = {"content": [_token("The", k), _token(" answer", k)]} if body.get("logprobs") else None
        usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
        if not body.get("stream"):
            return web.json_response({"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                                      "choices": [{"index": 0, "finish_reason": "stop", "logprobs": logprobs,
                                                   "message": {"role": "assistant", "content": "The answer"}}],
                                      "usage": usage})
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for chunk in ({"index": 0, "delta": {"content": "The answer"}, "logprobs": logprobs, "finish_reason": None},):
            event = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                     "choices": [chunk]}
            await out.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        end = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"], "choices": [],
               "usage": usage}
        await out.write(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
        return out

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    seen.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield seen
    finally:
        await runner.cleanup()


@asynccontextmanager
async def gate(api_key: str | None = KEY) -> AsyncIterator[tuple[openai.AsyncOpenAI, Upstream]]:
    """The gate on a free port in front of the double: model 'lemon-small' (llama-server, log-probabilities)
    and 'lemon-plain' (llama_cpp.server, none), 'lemon-embedded' (the embedded engine: log-probabilities, no
    streams); an `openai` client that does not retry."""
    import asyncio

    async with upstream() as up:
        routes = {"lemon-small": Route("lemon-small", up.url, logprobs=True),
                  "lemon-plain": Route("lemon-plain", up.url, logprobs=False, stream_usage=False),
                  "lemon-embedded": Route("lemon-embedded", up.url, logprobs=True, stream_usage=False, streams=False)}
        port = free_port()
        ready = asyncio.Event()
        task = asyncio.create_task(run_gate(routes, "127.0.0.1", [port], api_key, ready.set))
        await asyncio.wait_for(ready.wait(), 10)
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
        try:
            yield client, up
        finally:
            await client.close()
            task.cancel()


async def test_an_unknown_model_is_404_and_reaches_no_server() -> None:
    async with gate() as (client, up):
        with pytest.raises(openai.NotFoundError) as err:
            await client.chat.completions.create(model="gpt-4o", messages=HI)  # type: ignore[arg-type]
        assert err.value.code == "model_not_found" and "lemon-small" in err.value.message
        assert [m.id for m in (await client.models.list()).data] == ["lemon-small", "lemon-plain", "lemon-embedded"]
    assert up.received == []


@pytest.mark.parametrize("bad", [
    {"messages": [{"role": "robot", "content": "hi"}]},
    {"messages": [{"role": "tool", "content": "4", "tool_call_id": "x"}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]},
    {"messages": []},
    {"n": 2},
    {"top_logprobs": 3},  # without logprobs
    {"logprobs": True, "top_logprobs": 21},
    {"tools": [{"type": "function", "function": {"name": "f"}}]},
], ids=["role", "tool_role", "image", "no_messages", "n2", "top_without_logprobs", "top_21", "tools"])
async def test_a_bad_request_is_400_not_500(bad: dict) -> None:
    """A 500 is what the SDK retries (twice by default) and what llama.cpp answered a bad role with."""
    async with gate() as (client, up):
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(**{"model": "lemon-small", "messages": HI, **bad})
        assert err.value.status_code == 400 and err.value.body is not None
    assert up.received == []


async def test_the_api_key_is_required_when_set() -> None:
    import aiohttp

    async with gate() as (client, up):
        wrong = client.with_options(api_key="sk-wrong")
        with pytest.raises(openai.AuthenticationError):
            await wrong.chat.completions.create(model="lemon-small", messages=HI)  # type: ignore[arg-type]
        with pytest.raises(openai.AuthenticationError):
            await wrong.models.list()
        async with aiohttp.ClientSession() as http, \
                http.post(f"{client.base_url}chat/completions", json={"model": "lemon-small"}) as r:
            assert r.status == 401  # no Authorization header at all
            assert r.status == 401 and (await r.json())["error"]["code"] == "invalid_api_key"
        reply = await client.chat.completions.create(model="lemon-small", messages=HI)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "The answer" and len(up.received) == 1
    async with gate(api_key=None) as (client, _):
        assert (await client.with_options(api_key="anything").models.list()).data


@pytest.mark.parametrize("top", [0, 1, 3])
async def test_logprobs_come_back_with_as_many_alternatives_as_asked(top: int) -> None:
    """llama-server keeps no log-probabilities at all for top_logprobs 0: it is asked for 1, trimmed back."""
    async with gate() as (client, up):
        reply = await client.chat.completions.create(model="lemon-small", messages=HI,  # type: ignore[arg-type]
                                                     logprobs=True, top_logprobs=top)
        chunks = [c async for c in await client.chat.completions.create(
            model="lemon-small", messages=HI, logprobs=True, top_logprobs=top, stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True})]
    tokens = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [t.token for t in tokens] == ["The", " answer"] and all(len(t.top_logprobs) == top for t in tokens)
    streamed = [t for c in chunks for ch in c.choices for t in (ch.logprobs.content if ch.logprobs else [])]
    assert len(streamed) == 2 and all(len(t.top_logprobs) == top for t in streamed)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2
    assert [b["top_logprobs"] for b in up.received] == [max(top, 1)] * 2


async def test_logprobs_from_llama_cpp_server_are_a_400_naming_llama_server() -> None:
    async with gate() as (client, up):
        with pytest.raises(openai.BadRequestError, match="build_llama_server"):
            await client.chat.completions.create(model="lemon-plain", messages=HI,  # type: ignore[arg-type]
                                                 logprobs=True)
        plain = await client.chat.completions.create(model="lemon-plain", messages=HI)  # type: ignore[arg-type]
    assert plain.choices[0].message.content == "The answer" and len(up.received) == 1


async def test_a_stream_from_llama_cpp_server_ends_with_usage_when_asked() -> None:
    """llama_cpp.server cannot end a stream with usage: such a stream is asked of it whole and sent as one
    chunk, then usage (its own count); without `include_usage` the stream is its own, passed through."""
    async with gate() as (client, up):
        asked = [c async for c in await client.chat.completions.create(
            model="lemon-plain", messages=HI, stream=True, stream_options={"include_usage": True})]  # type: ignore[arg-type]
        plain = [c async for c in await client.chat.completions.create(
            model="lemon-plain", messages=HI, stream=True)]  # type: ignore[arg-type]
    assert "".join(ch.delta.content or "" for c in asked for ch in c.choices) == "The answer"
    assert asked[-1].usage is not None and asked[-1].usage.completion_tokens == 2 and not asked[-1].choices
    assert [b.get("stream") for b in up.received] == [None, True] and len(plain) == 2


async def test_a_stream_from_the_embedded_engine_is_asked_whole_with_its_logprobs() -> None:
    """The embedded engine does not stream: every stream is asked of it whole and sent as one chunk (its
    log-probabilities with it), then usage only when asked."""
    async with gate() as (client, up):
        plain = [c async for c in await client.chat.completions.create(
            model="lemon-embedded", messages=HI, stream=True, logprobs=True)]  # type: ignore[arg-type]
        asked = [c async for c in await client.chat.completions.create(
            model="lemon-embedded", messages=HI, stream=True, stream_options={"include_usage": True})]  # type: ignore[arg-type]
    assert [b.get("stream") for b in up.received] == [None, None]
    assert len(plain) == 1 and plain[0].choices[0].delta.content == "The answer" and plain[0].usage is None
    assert [t.token for t in plain[0].choices[0].logprobs.content] == ["The", " answer"]  # type: ignore[union-attr]
    assert len(asked) == 2 and asked[-1].usage is not None and asked[-1].usage.completion_tokens == 2


async def test_lemon_s_own_backend_passes_with_its_extensions_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A served pool file points LEMON's backend at the gate: its JSON schema, grammar and repeat_penalty
    (llama.cpp's extensions) reach the server as sent, the key from the pool's api_key_env."""
    from lemon.llm.base import ChatRequest, GenParams, Message
    from lemon.llm.openai_compat import OpenAIBackend

    async with gate() as (client, up):
        monkeypatch.setenv("LEMON_SERVE_API_KEY", KEY)
        backend = OpenAIBackend(str(client.base_url).rstrip("/"), "lemon-small", max_retries=0,
                                api_key_env="LEMON_SERVE_API_KEY")
        request = ChatRequest((Message("system", "Be brief."), Message("user", "2+2?")),
                              GenParams(max_tokens=8, seed=3, repeat_penalty=1.0, stop=("\n",)),
                              json_schema={"type": "object"}, grammar='root ::= "4"')
        try:
            reply = await backend.complete(request)
        finally:
            await backend.aclose()
    assert reply.text == "The answer" and reply.completion_tokens == 2
    (sent,) = up.received
    kwargs = backend.request_kwargs(request)
    assert sent == {k: v for k, v in kwargs.items() if k != "extra_body"} | kwargs["extra_body"]
    assert sent["grammar"] == 'root ::= "4"' and sent["response_format"]["schema"] == {"type": "object"}


async def test_unknown_paths_and_bodies_get_openai_errors() -> None:
    import aiohttp

    async with gate() as (client, up):
        with pytest.raises(openai.NotFoundError):
            await client.embeddings.create(model="lemon-small", input="x")
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as http:
            async with http.post(f"{client.base_url}chat/completions", data=b"{not json") as r:
                assert r.status == 400 and "not JSON" in (await r.json())["error"]["message"]
            async with http.post(f"{client.base_url}chat/completions", data=b"x" * (9 << 20)) as r:
                assert r.status == 413
    assert up.received == []
