"""An endpoint nothing listens on (issue 52, point 14): `lemon run` says so in one line and exits 2, before the
spec or the agents' table is printed, and a refused connection is not retried (waiting does not start a server,
unlike a 503 or a timeout)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lemon.errors import BackendError
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.openai_compat import OpenAIBackend
from tests.cli.test_cli_core import lemon
from tests.llm.servers import Fault, completion, fault_server, free_port

HI = ChatRequest((Message("user", "2+2?"),), GenParams(max_tokens=8))


def _one_line_exit_2(proc: object, expected: str) -> None:
    """Exit 2, nothing on stdout, exactly one line on stderr: the error."""
    assert proc.returncode == 2, proc.stdout + proc.stderr  # type: ignore[attr-defined]
    assert proc.stdout == "", proc.stdout  # type: ignore[attr-defined]
    lines = proc.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines


def test_lemon_run_against_a_refused_port_is_one_line(_isolated_home: Path) -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    start = time.monotonic()
    proc = lemon("run", "What is 2+2?", "--model", "m", "--base-url", base, "--no-cache", home=_isolated_home,
                 timeout=120)
    _one_line_exit_2(proc, f"endpoint {base} refused the connection")
    assert time.monotonic() - start < 30


def test_lemon_exec_against_a_refused_port_is_one_line(tmp_path: Path, _isolated_home: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("agents:\n  - {name: a, role: generalist, capacity: small}\n")
    pool = tmp_path / "p.yaml"
    pool.write_text(f"name: p\nlevels:\n  - {{name: small, backend: openai, model: m, base_url: "
                    f"'http://127.0.0.1:{free_port()}/v1'}}\n")
    proc = lemon("exec", str(spec), "What is 2+2?", "--pool", str(pool), "--no-cache", home=_isolated_home,
                 timeout=120)
    _one_line_exit_2(proc, "refused the connection")


async def test_a_refused_connection_is_not_retried() -> None:
    """The server answered, then went away: the next call fails at once, not after 3 backoffs (0.5 + 1 + 2 s
    here, as the pool default 0.5 s would be)."""
    with fault_server(lambda body, n: Fault(200, completion(), (("Connection", "close"),))) as ep:
        backend = OpenAIBackend(ep.base_url, "m", max_retries=3, backoff_s=0.5)
        assert (await backend.complete(HI)).text == "The answer is 4."
    start = time.monotonic()
    try:
        with pytest.raises(BackendError, match="refused the connection") as err:
            await backend.complete(HI)
    finally:
        await backend.aclose()
    assert time.monotonic() - start < 1.0 and "\n" not in str(err.value)
