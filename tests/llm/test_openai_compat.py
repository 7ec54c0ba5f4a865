"""The OpenAI-compatible backend: request translation, refused connections, and a REAL llama.cpp server."""

from __future__ import annotations

import json
import time

import pytest

from lemon.errors import BackendError
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.openai_compat import OpenAIBackend
from lemon.spec.roles import RoleLibrary
from lemon.spec.schema import spec_json_schema
from tests.llm.servers import free_port, llama_server, scripted_http_server

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


def test_json_schema_is_translated_for_llama_cpp_and_openai() -> None:
    req = ChatRequest((Message("user", "hi"),), GenParams(repeat_penalty=1.1, seed=4), json_schema=SCHEMA)
    llama = OpenAIBackend("http://127.0.0.1:1/v1", "m").request_kwargs(req)
    assert llama["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert llama["extra_body"] == {"repeat_penalty": 1.1} and llama["seed"] == 4
    oai = OpenAIBackend("http://127.0.0.1:1/v1", "m", schema_style="openai", extensions=False).request_kwargs(req)
    assert oai["response_format"]["type"] == "json_schema" and "extra_body" not in oai


async def test_refused_connection_fails_fast_with_a_clear_error() -> None:
    """Nothing listens there: one line at once, not retried (issue 52: waiting does not start a server)."""
    backend = OpenAIBackend(f"http://127.0.0.1:{free_port()}/v1", "m", max_retries=2, backoff_s=2)
    start = time.perf_counter()
    with pytest.raises(BackendError, match=r"refused the connection \(nothing listens at 127.0.0.1:\d+\)"):
        await backend.complete(ChatRequest((Message("user", "hi"),)))
    assert time.perf_counter() - start < 2
    await backend.aclose()


OK = json.dumps({"choices": [{"message": {"role": "assistant", "content": "4"}}],
                 "usage": {"prompt_tokens": 7, "completion_tokens": 1}}).encode()
HI = ChatRequest((Message("user", "2+2?"),), GenParams(seed=3))


async def test_transient_errors_are_retried_and_the_request_body_is_the_chat_completion() -> None:
    with scripted_http_server([(503, b'{"error": {"message": "loading"}}', 0), (429, b"{}", 0), (200, OK, 0)]) \
            as (base, received):
        backend = OpenAIBackend(base, "m", max_retries=3, backoff_s=0.01)
        out = await backend.complete(HI)
        await backend.aclose()
    assert (out.text, out.prompt_tokens, out.completion_tokens) == ("4", 7, 1)
    assert len(received) == 3
    assert received[-1]["model"] == "m" and received[-1]["seed"] == 3
    assert received[-1]["messages"] == [{"role": "user", "content": "2+2?"}]


async def test_a_bad_request_fails_at_once_with_the_servers_message() -> None:
    with scripted_http_server([(400, b'{"error": {"message": "max_tokens is too large"}}', 0)]) as (base, received):
        backend = OpenAIBackend(base, "m", max_retries=3, backoff_s=0.01)
        with pytest.raises(BackendError, match=r"HTTP 400\): max_tokens is too large"):
            await backend.complete(HI)
        await backend.aclose()
    assert len(received) == 1  # not retried


async def test_timeouts_and_non_json_answers_are_clear_errors() -> None:
    with scripted_http_server([(200, OK, 1.0)]) as (base, received):
        backend = OpenAIBackend(base, "m", timeout_s=0.2, max_retries=1, backoff_s=0.01)
        with pytest.raises(BackendError, match=r"timed out after 2 attempt"):
            await backend.complete(HI)
        await backend.aclose()
    assert len(received) == 2  # a timeout is transient: retried once
    with scripted_http_server([(200, b"<html>proxy login</html>", 0)]) as (base, _):
        backend = OpenAIBackend(base, "m")
        with pytest.raises(BackendError, match="not a chat completion: <html>proxy login"):
            await backend.complete(HI)
        await backend.aclose()


def test_missing_api_key_variable_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from lemon.errors import ConfigError

    monkeypatch.delenv("LEMON_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="LEMON_TEST_KEY"):
        OpenAIBackend("http://127.0.0.1:1/v1", "m", api_key_env="LEMON_TEST_KEY")


@pytest.mark.models
@pytest.mark.server
async def test_real_llama_cpp_server_chat_and_schema() -> None:
    from lemon.llm.models import ensure_model

    with llama_server(ensure_model("smollm2-135m")) as base:
        backend = OpenAIBackend(base, "smollm2", concurrency=2, timeout_s=120)
        try:
            plain = await backend.complete(ChatRequest((Message("user", "Say hello."),),
                                                       GenParams(max_tokens=16)))
            assert plain.text.strip() and plain.prompt_tokens > 0 and plain.completion_tokens > 0
            roles = RoleLibrary.load()
            schema = spec_json_schema(roles.llm_role_names(), ("small", "large"), max_agents=2, max_duty_len=60)
            constrained = await backend.complete(ChatRequest(
                (Message("user", "Write a JSON team of agents for: add 2 and 3."),),
                GenParams(max_tokens=200, repeat_penalty=1.15), json_schema=schema))
            data = json.loads(constrained.text)  # the server honoured the translated schema
            assert 1 <= len(data["agents"]) <= 2
            assert all(a["capacity"] in ("small", "large") for a in data["agents"])
        finally:
            await backend.aclose()
