"""`lemon serve` as a user runs it: it prints where each model is served and the served pool file, the
servers answer, and Ctrl-C stops them (exit 0: stopping is what Ctrl-C is for here)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from lemon.llm.pools import read_pool_config
from lemon.llm.serve import _answers
from tests.llm.servers import free_port, lemon_serve

pytestmark = [pytest.mark.server, pytest.mark.models]


def _as_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what bash does to `lemon serve &` in a script


# Ctrl-C; SIGTERM (kill's default: it ended the process and left its servers running); Ctrl-C to a background
# job of a script, which starts with SIGINT ignored (experiments/gpu.sh's eval stage waited on it forever).
@pytest.mark.parametrize(("sig", "preexec"), [(signal.SIGINT, None), (signal.SIGTERM, None),
                                              (signal.SIGINT, _as_background_job)], ids=["int", "term", "bg-int"])
def test_serve_until_ctrl_c(tmp_path: Path, _isolated_home: Path, sig: signal.Signals, preexec: object) -> None:
    port = free_port()
    args = ["--pool", "tiny", "--port", str(port), "--out", str(tmp_path / "served"), "--threads", "1"]
    env = {**os.environ, "LEMON_HOME": str(_isolated_home)}
    with lemon_serve(args, env, preexec=preexec) as (proc, lines):  # type: ignore[arg-type]
        assert any(f"small, medium, large: smollm2-135m on http://127.0.0.1:{port}/v1" in x for x in lines), lines
        pool_file = tmp_path / "served" / "pool.yaml"
        assert read_pool_config(str(pool_file)).levels[0].base_url == f"http://127.0.0.1:{port}/v1"
        assert _answers(f"http://127.0.0.1:{port}/v1")
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()  # type: ignore[union-attr]
    assert not _answers(f"http://127.0.0.1:{port}/v1")
