"""A silent or stalling OpenAI-compatible endpoint (issue 26, item 4), against real servers on 127.0.0.1.

Before: a server that accepted connections and never answered held `lemon run` for timeout x attempts
(120 s x 4, about 8 minutes) with one "retry" line every 2 minutes. Now it must answer something within
`first_byte_s` (10 s by default); a completion that runs long is announced with the full budget stated."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lemon.errors import BackendError, ConfigError
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.openai_compat import OpenAIBackend
from lemon.llm.pools import load_pool
from tests.cli.test_cli_core import assert_clean_error, lemon
from tests.llm.servers import QuietHandler, completion, root_url, serving

HI = ChatRequest((Message("user", "2+2?"),), GenParams(seed=3))


@contextmanager
def silent_server() -> Iterator[str]:
    """Accepts every connection, reads what comes, never sends a byte (a hung process behind the port)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


@contextmanager
def stalling_server(answer_first: int = 0) -> Iterator[tuple[str, threading.Event]]:
    """An HTTP server whose first `answer_first` completions are answered; then POSTs stall until released.
    GETs are answered (404) until `silent` is set, after which they stall too."""
    release, silent = threading.Event(), threading.Event()
    posts = [0]

    class Handler(QuietHandler):
        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if silent.is_set():
                release.wait(60)
                return
            self._reply(404, b"{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            posts[0] += 1
            if posts[0] <= answer_first:
                self._reply(200, completion())
                return
            release.wait(60)

    with serving(Handler) as server:
        try:
            yield f"{root_url(server)}/v1", silent
        finally:
            release.set()


def test_lemon_run_against_a_silent_endpoint_fails_in_seconds_with_one_line(_isolated_home: Path) -> None:
    """The issue's case, with every default: old code waited 120 s x 4 attempts before this line."""
    with silent_server() as base:
        start = time.monotonic()
        proc = lemon("run", "What is 2+2?", "--model", "m", "--base-url", base, "--no-cache",
                     home=_isolated_home, timeout=100)
        elapsed = time.monotonic() - start
    assert_clean_error(proc, f"endpoint {base} timed out: no answer within 10 s")
    said = " ".join(proc.stderr.split())
    assert "no answer yet; waiting up to 10 s" in said  # the wait is visible while it lasts
    assert "timeout 120 s x 4 attempt(s), at most 8 min in all" in said
    assert elapsed < 90, elapsed


async def test_a_long_completion_is_announced_with_the_full_budget(caplog: pytest.LogCaptureFixture) -> None:
    with stalling_server() as (base, _):
        backend = OpenAIBackend(base, "m", timeout_s=1.5, max_retries=1, backoff_s=0.01, notice_s=0.4)
        with caplog.at_level(logging.WARNING, logger="lemon.llm.openai_compat"), \
                pytest.raises(BackendError) as err:
            await backend.complete(HI)
        await backend.aclose()
    said = [r.getMessage() for r in caplog.records]
    budget = "timeout 1.5 s x 2 attempt(s), at most 3 s in all"
    assert any("still waiting for a completion" in m and "attempt 1 of 2" in m and budget in m for m in said), said
    assert any("timed out after 1.5 s (attempt 1 of 2" in m for m in said), said
    assert "timed out after 2 attempt(s)" in str(err.value) and budget in str(err.value)


async def test_an_endpoint_that_goes_silent_mid_run_fails_after_one_timeout_not_all() -> None:
    """It answered the first call; then nothing answers. The probe after the first timed-out attempt finds it
    silent: one timeout plus the first-byte deadline (about 2.5 s here), not 4 x 2 s plus backoff."""
    with stalling_server(answer_first=1) as (base, silent):
        backend = OpenAIBackend(base, "m", timeout_s=2.0, max_retries=3, backoff_s=0.01, first_byte_s=0.5)
        assert (await backend.complete(HI)).text == "The answer is 4."
        silent.set()
        start = time.monotonic()
        with pytest.raises(BackendError, match=r"no answer within 0.5 s"):
            await backend.complete(HI)
        elapsed = time.monotonic() - start
        await backend.aclose()
    assert 2.0 <= elapsed < 6.0, elapsed


async def test_a_server_that_answers_the_probe_but_is_slow_still_gets_its_full_timeout() -> None:
    """A busy server (the probe answered) is waited for: every attempt, each with the whole timeout."""
    with stalling_server() as (base, _):
        backend = OpenAIBackend(base, "m", timeout_s=0.6, max_retries=2, backoff_s=0.01, first_byte_s=0.2)
        start = time.monotonic()
        with pytest.raises(BackendError, match=r"timed out after 3 attempt\(s\)"):
            await backend.complete(HI)
        assert time.monotonic() - start >= 1.8
        await backend.aclose()


def test_a_pool_file_sets_the_first_byte_deadline_and_bounds_it(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    level = "{name: a, backend: openai, model: m, base_url: 'http://127.0.0.1:1/v1', first_byte_s: %s}"
    good.write_text("name: p\nlevels:\n  - " + level % "3")
    bad.write_text("name: p\nlevels:\n  - " + level % "0")
    backend = load_pool(str(good), cache=False).levels[0].backend
    assert isinstance(backend, OpenAIBackend) and backend.first_byte_s == 3
    with pytest.raises(ConfigError, match="first_byte_s"):
        load_pool(str(bad), cache=False)
