"""A hostile OpenAI-compatible endpoint (a real HTTP server on 127.0.0.1 injecting faults): every bad reply is
a one-line `BackendError` for that call, never a traceback or a negative cost; huge bodies are not read;
`Retry-After` is honoured; hangs time out."""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import resource
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lemon.errors import BackendError, ConfigError
from lemon.llm.base import ChatRequest, Completion, GenParams, Message
from lemon.llm.openai_compat import ChatReply, OpenAIBackend, parse_reply, retry_after_s
from tests.llm.servers import WRONG_SHAPES, Fault, FaultEndpoint, completion, fault_server, huge_completion

HI = ChatRequest((Message("user", "2+2?"),), GenParams(max_tokens=8))


async def _complete(base: str, **kwargs: object) -> Completion:
    backend = OpenAIBackend(base, "m", **{"max_retries": 0, "backoff_s": 0.01, **kwargs})  # type: ignore[arg-type]
    try:
        return await backend.complete(HI)
    finally:
        await backend.aclose()


async def _error(pick: Callable[[dict, int], Fault], **kwargs: object) -> tuple[FaultEndpoint, str]:
    """The one-line BackendError a call against the fault server raises (failing the test if none)."""
    with fault_server(pick) as ep:
        try:
            await _complete(ep.base_url, **kwargs)
        except BackendError as exc:
            return ep, str(exc)
    pytest.fail("the call succeeded")


@pytest.mark.parametrize("name", sorted(WRONG_SHAPES))
async def test_each_wrong_shape_is_a_one_line_backend_error(name: str) -> None:
    ep, message = await _error(lambda body, n: Fault(200, WRONG_SHAPES[name]), max_retries=3)
    assert "\n" not in message and ep.base_url in message
    assert "malformed chat completion" in message or "not a chat completion" in message
    assert len(ep.received) == 1  # a malformed reply is not retried: the same request would get the same


async def test_a_valid_reply_passes_and_null_content_is_empty_text() -> None:
    replies = [completion("4", {"prompt_tokens": 9, "completion_tokens": 1.0, "total_tokens": 10}),
               completion(None, {"prompt_tokens": 3, "completion_tokens": 0}),
               b'{"choices": [{"message": {"content": "ok"}}]}']  # usage absent: counted 0
    with fault_server(lambda body, n: Fault(200, replies[n])) as ep:
        outs = [await _complete(ep.base_url) for _ in replies]
    assert [(c.text, c.prompt_tokens, c.completion_tokens) for c in outs] == [("4", 9, 1), ("", 3, 0), ("ok", 0, 0)]


async def test_a_huge_body_is_refused_without_reading_it() -> None:
    total = 64 * 1024 * 1024  # a VALID completion, 8x the cap: only its size is wrong
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ep, message = await _error(lambda body, n: Fault(200, huge_completion(total)))
    assert "larger than 8388608 bytes" in message
    assert ep.chunked_bytes_sent < total // 2  # the client hung up early instead of reading it all
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 48, f"peak RSS grew by {grown_mb:.0f} MB"


async def test_the_cap_is_configurable_and_a_declared_length_is_checked_first() -> None:
    _, chunked = await _error(lambda body, n: Fault(200, huge_completion(1 << 20)), max_body_bytes=65536)
    assert "larger than 65536 bytes (more than 65536 bytes received)" in chunked  # chunked: no length given
    _, declared = await _error(lambda body, n: Fault(200, completion("x" * 70000)), max_body_bytes=65536)
    assert "larger than 65536 bytes (Content-Length 70" in declared


async def test_429_retry_after_seconds_is_honoured() -> None:
    replies = [Fault(429, b'{"error": {"message": "slow down"}}', (("Retry-After", "1"),)), Fault(200, completion())]
    with fault_server(lambda body, n: replies[min(n, 1)]) as ep:
        out = await _complete(ep.base_url, max_retries=2, backoff_s=0.01)
    assert out.text == "The answer is 4."
    (t0, _), (t1, _) = ep.received
    assert t1 - t0 >= 0.95, f"retried after {t1 - t0:.2f}s although the server asked for 1s"


async def test_503_retry_after_http_date_is_honoured() -> None:
    when = email.utils.formatdate(time.time() + 2, usegmt=True)  # whole seconds: waits 1 to 2 s
    replies = [Fault(503, b"busy", (("Retry-After", when),)), Fault(200, completion())]
    with fault_server(lambda body, n: replies[min(n, 1)]) as ep:
        await _complete(ep.base_url, max_retries=1, backoff_s=0.01)
    (t0, _), (t1, _) = ep.received
    assert t1 - t0 >= 0.9


async def test_a_retry_after_beyond_the_cap_fails_at_once_with_the_reason() -> None:
    with fault_server(lambda body, n: Fault(429, b"{}", (("Retry-After", "3600"),))) as ep:
        start = time.perf_counter()
        with pytest.raises(BackendError, match=r"asks to wait 3600s \(more than 5s\)"):
            await _complete(ep.base_url, max_retries=3, max_retry_after_s=5)
    assert time.perf_counter() - start < 2 and len(ep.received) == 1


async def test_a_hanging_endpoint_times_out_per_attempt() -> None:
    with fault_server(lambda body, n: Fault(200, completion(), delay_s=30)) as ep:
        start = time.perf_counter()
        with pytest.raises(BackendError, match=r"timed out after 2 attempt"):
            await _complete(ep.base_url, timeout_s=0.3, max_retries=1)
    assert time.perf_counter() - start < 3 and len(ep.received) == 2


async def test_an_endpoint_that_hangs_up_mid_body_is_a_transient_error() -> None:
    def cut() -> object:
        yield b'{"choices": [{"mess'
        raise ConnectionResetError  # the server dies mid-reply

    ep, message = await _error(lambda body, n: Fault(200, cut), max_retries=1, timeout_s=2)  # type: ignore[arg-type]
    assert "sent a broken body after 2 attempt" in message and len(ep.received) == 2


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    assert retry_after_s("3", now) == 3.0 and retry_after_s(" 0.5 ", now) == 0.5
    assert retry_after_s(email.utils.formatdate(now + 7, usegmt=True), now) == pytest.approx(7, abs=1)
    assert retry_after_s(email.utils.formatdate(now - 60, usegmt=True), now) == 0.0  # in the past: now
    for bad in (None, "", "soon", "nan", "inf", "-inf", "9" * 100):
        assert retry_after_s(bad, now) is None
    assert retry_after_s("-5", now) == 0.0


def test_non_positive_max_tokens_is_a_config_error_not_unlimited() -> None:
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigError, match="max_tokens must be a positive integer"):
            GenParams(max_tokens=bad)  # type: ignore[arg-type]


def test_completions_with_negative_or_non_integer_counts_cannot_be_built() -> None:
    for pt, ct in ((-1, 0), (0, -1000005), (float("nan"), 0), ("7", 0)):
        with pytest.raises(BackendError, match="token count"):
            Completion("x", pt, ct, 0.0, "m")  # type: ignore[arg-type]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
        st.sampled_from(["choices", "message", "content", "usage", "prompt_tokens", "completion_tokens",
                         "finish_reason", "x"]), kids, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON)
def test_any_json_reply_parses_to_a_valid_reply_or_a_backend_error(value: object) -> None:
    raw = json.dumps(value, allow_nan=True).encode()
    try:
        reply = parse_reply(raw, "http://x")
    except BackendError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(reply, ChatReply) and isinstance(reply.text, str)
    usage = reply.usage
    if usage is not None:
        for n in (usage.prompt_tokens, usage.completion_tokens):
            assert isinstance(n, int) and 0 <= n < 2**31 and math.isfinite(n)


async def test_concurrent_faults_do_not_disturb_good_calls() -> None:
    """Faults on some requests (by prompt) and good replies on others, all in flight at once."""

    def pick(body: dict, n: int) -> Fault:
        text = body["messages"][0]["content"]
        return Fault(200, WRONG_SHAPES["usage_negative"] if "bad" in text else completion("fine"), delay_s=0.05)

    with fault_server(pick) as ep:
        backend = OpenAIBackend(ep.base_url, "m", max_retries=0, concurrency=8)
        reqs = [ChatRequest((Message("user", f"{'bad' if i % 3 == 0 else 'good'} {i}"),)) for i in range(9)]
        results = await asyncio.gather(*(backend.complete(r) for r in reqs), return_exceptions=True)
        await backend.aclose()
    assert [isinstance(r, BackendError) for r in results] == [i % 3 == 0 for i in range(9)]
    assert all(r.text == "fine" for r in results if isinstance(r, Completion))
