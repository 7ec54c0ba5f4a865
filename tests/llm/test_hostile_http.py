"""Replies that are not HTTP a client should act on (issue 52, point 4), from real servers on 127.0.0.1: a broken
status line, a header over aiohttp's 8 kB, a redirect loop, a redirect to `file://`, and a 307 to another
origin. Each is one call's one-line `BackendError` (so a run or an evaluation counts the item as an error and
stores its row), never a traceback; no redirect is followed, so the prompt goes nowhere but `base_url`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lemon.benchmarks.registry import load_split
from lemon.errors import BackendError
from lemon.evaluation.evaluate import default_split
from lemon.evaluation.store import ResultsStore
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.openai_compat import OpenAIBackend
from lemon.llm.pool import Pool
from tests.evalcall import evaluate_kw
from tests.llm.servers import Fault, completion, fault_server, http_reply, raw_http_server
from tests.pools import scripted_pool

HI = ChatRequest((Message("user", "2+2?"),), GenParams(max_tokens=8))
OK = http_reply(b"HTTP/1.1 200 OK", completion("The answer is 4."), (b"Content-Type: application/json",))


def _redirect(status: int, location: str) -> bytes:
    return http_reply(b"HTTP/1.1 %d Moved" % status, b"", (f"Location: {location}".encode(),))


FAULTS: dict[str, tuple[Callable[[str], bytes], str]] = {
    # name: (the reply, given the server's own URL; what the one line says)
    "bad_status_line": (lambda url: http_reply(b"HTTP/1.1 OK-ish nonsense", b"{}"), "not valid HTTP"),
    "not_http": (lambda url: b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not valid HTTP"),
    "huge_header": (lambda url: http_reply(b"HTTP/1.1 200 OK", completion(), (b"X-Big: " + b"a" * 9000,)),
                    "not valid HTTP"),
    "redirect_loop": (lambda url: _redirect(302, url + "/chat/completions"), "redirected the request (HTTP 302)"),
    "redirect_to_file": (lambda url: _redirect(307, "file:///etc/passwd"), "to file:///etc/passwd"),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
async def test_a_reply_that_is_not_usable_http_is_a_one_line_backend_error(name: str) -> None:
    reply, said = FAULTS[name]
    url: list[str] = []
    with raw_http_server(lambda body, n: reply(url[0])) as ep:
        url.append(ep.base_url)
        backend = OpenAIBackend(ep.base_url, "m", max_retries=2, backoff_s=0.01, timeout_s=5)
        try:
            with pytest.raises(BackendError) as err:
                await backend.complete(HI)
        finally:
            await backend.aclose()
    assert said in str(err.value) and "\n" not in str(err.value)
    assert len(ep.received) == 1  # not retried: the same server would send the same


async def test_a_307_to_another_origin_is_not_followed_with_the_prompt() -> None:
    """The endpoint redirects the POST, body and all, to another server: the other server never sees it."""
    with fault_server(lambda body, n: Fault(200, completion("stolen"))) as other:
        target = other.base_url + "/chat/completions"
        with raw_http_server(lambda body, n: _redirect(307, target)) as ep:
            backend = OpenAIBackend(ep.base_url, "m", max_retries=0)
            try:
                with pytest.raises(BackendError, match=r"redirected the request \(HTTP 307\) to http://127"):
                    await backend.complete(HI)
            finally:
                await backend.aclose()
    assert other.received == []


def _items(data_dir: Path, n: int) -> list:  # type: ignore[type-arg]
    return list(load_split("multiarith", default_split("multiarith"), data_dir=data_dir))[:n]


async def test_an_eval_stores_a_row_for_each_item_a_broken_reply_failed(tmp_path: Path, data_dir: Path) -> None:
    """Items 0-4 meet the faults above; items 5-7 are answered. Before: the first fault ended the whole
    evaluation in a traceback, no row stored."""
    items = _items(data_dir, 8)
    names = sorted(FAULTS)
    url: list[str] = []

    def pick(body: dict, n: int) -> bytes:
        text = "\n".join(m["content"] for m in body.get("messages", []))
        for i, item in enumerate(items):
            if item.question in text:
                if i < len(names):
                    return FAULTS[names[i]][0](url[0])
                return http_reply(b"HTTP/1.1 200 OK", completion(f"The answer is {item.answer}."))
        return http_reply(b"HTTP/1.1 404 Not Found", b"{}")  # the liveness probe's GET

    def pool() -> Pool:
        backend = OpenAIBackend(url[0], "m", max_retries=1, backoff_s=0.01, timeout_s=5)
        return scripted_pool(backend, concurrency=4, name="raw", defaults=GenParams(max_tokens=32))

    with raw_http_server(pick) as ep:
        url.append(ep.base_url)
        summary = await evaluate_kw("multiarith", "vanilla", limit=8, concurrency=2, store=tmp_path / "r.sqlite",
                                    data_dir=data_dir, pool="raw", level="small", temperature=0.0,
                                    pool_factory=pool)
    assert summary.computed == 8 and summary.in_error == len(names)
    with ResultsStore(tmp_path / "r.sqlite") as db:
        rows = {r.item_id: r for r in db.items(summary.run_id)}
    assert len(rows) == 8
    for i, name in enumerate(names):
        assert FAULTS[name][1] in (rows[str(items[i].id)].stop_reason or ""), name
