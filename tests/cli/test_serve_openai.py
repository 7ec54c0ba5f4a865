"""`lemon serve` as an OpenAI endpoint, met by the official `openai` client (issue 52, point 12): the real
command serving the tiny pool (SmolLM2-135M) with llama.cpp's llama-server, on a --host of its choosing, with an
--api-key. An unknown model is 404, a bad request 400 (never the 500 the SDK retries), a missing key 401;
streams end with usage when asked; log-probabilities come back with 0..k alternatives per token."""

from __future__ import annotations

import math
import os
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from lemon.llm.pools import read_pool_config
from tests.llm.servers import built_llama_server, free_port, lemon_serve

pytestmark = [pytest.mark.server, pytest.mark.models]

KEY = "sk-lemon-serve-test"
HOST = "127.0.0.2"  # loopback too, yet not 127.0.0.1: shows --host is where it listens
HI = [{"role": "user", "content": "What is 2+2? Answer briefly."}]


@contextmanager
def keyed_serve(home: Path, out: Path) -> Iterator[tuple[int, list[str]]]:
    """`lemon serve --pool tiny --host HOST --port P` with LEMON_SERVE_API_KEY and LEMON_LLAMA_SERVER set, until
    its 'served pool' line; SIGTERM after. Yields the port and the lines it printed."""
    port = free_port()
    env = {**os.environ, "LEMON_HOME": str(home), "LEMON_SERVE_API_KEY": KEY,
           "LEMON_LLAMA_SERVER": str(built_llama_server())}
    args = ["--pool", "tiny", "--host", HOST, "--port", str(port), "--out", str(out), "--threads", "1"]
    with lemon_serve(args, env) as (proc, lines):
        yield port, lines
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()  # type: ignore[union-attr]


def test_lemon_serve_answers_the_openai_client_as_the_api_does(tmp_path: Path, _isolated_home: Path) -> None:
    with keyed_serve(_isolated_home, tmp_path / "served") as (port, lines):
        base = f"http://{HOST}:{port}/v1"
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
        model = client.models.list().data[0].id
        assert model == "smollm2-135m-llama-server" and f"on {base} as model {model!r}" in "".join(lines)
        cfg = read_pool_config(str(tmp_path / "served" / "pool.yaml"))
        assert {(lv.base_url, lv.api_key_env) for lv in cfg.levels} == {(base, "LEMON_SERVE_API_KEY")}
        with pytest.raises(urllib.error.URLError):  # --host: not on 127.0.0.1
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5)

        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="gpt-4o", messages=HI)  # type: ignore[arg-type]
        for bad in ({"messages": [{"role": "robot", "content": "hi"}]}, {"n": 2}):
            with pytest.raises(openai.BadRequestError):
                client.chat.completions.create(**{"model": model, "messages": HI, "max_tokens": 4, **bad})
        with pytest.raises(openai.AuthenticationError):
            client.with_options(api_key="sk-wrong").chat.completions.create(model=model, messages=HI)  # type: ignore[arg-type]

        stream = client.chat.completions.create(model=model, messages=HI, max_tokens=8, stream=True,  # type: ignore[arg-type]
                                                stream_options={"include_usage": True})
        chunks = list(stream)
        usage = [c.usage for c in chunks if c.usage is not None]
        assert usage and usage[-1].completion_tokens > 0 and usage[-1].prompt_tokens > 0

        for top in (0, 3):
            reply = client.chat.completions.create(model=model, messages=HI, max_tokens=6,  # type: ignore[arg-type]
                                                   logprobs=True, top_logprobs=top)
            tokens = reply.choices[0].logprobs.content  # type: ignore[union-attr]
            assert tokens and len(tokens) == reply.usage.completion_tokens  # type: ignore[union-attr]
            assert all(t.logprob <= 0 and math.isfinite(t.logprob) and len(t.top_logprobs) == top for t in tokens)
            assert "".join(t.token for t in tokens) == reply.choices[0].message.content
