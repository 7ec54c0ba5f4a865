"""`lemon.llm.serve`: a pool's embedded models behind real `llama_cpp.server` processes (issue 25).

One server per distinct model, healthy before the pool file is handed out, the same answers as the embedded
model under the same settings (greedy and seeded), and every server gone afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from lemon.errors import ConfigError
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.embedded import EmbeddedBackend
from lemon.llm.pools import load_pool, read_pool_config
from lemon.llm.serve import _answers, plan_workers, serving
from tests.llm.servers import free_port

pytestmark = [pytest.mark.server, pytest.mark.models]

QUESTION = (Message("user", "Natalia sold 48 clips in April and half as many in May. How many in all? Think briefly."),)


def _ask(backend: object, params: GenParams) -> str:
    async def go() -> str:
        try:
            return (await backend.complete(ChatRequest(QUESTION, params))).text  # type: ignore[attr-defined]
        finally:
            await backend.aclose()  # type: ignore[attr-defined]

    return asyncio.run(go())


def test_a_served_pool_answers_as_the_embedded_model_and_its_servers_stop(tmp_path: Path,
                                                                            _isolated_home: Path) -> None:
    port = free_port()
    with serving("tiny", tmp_path / "workers", port=port) as pool_file:
        cfg = read_pool_config(str(pool_file))
        assert {lv.backend for lv in cfg.levels} == {"openai"}
        assert {lv.base_url for lv in cfg.levels} == {f"http://127.0.0.1:{port}/v1"}  # one server, 3 levels
        assert cfg.defaults.repeat_penalty == 1.0
        pool = load_pool(str(pool_file), cache=False)
        # Seeded first: llama.cpp (embedded or served) reuses the key/value cache of a prompt prefix it has
        # seen, which changes the last bits of the logits, so sampled calls are compared from a fresh model.
        for params in (GenParams(temperature=0.7, max_tokens=48, seed=3), GenParams(temperature=0.0,
                                                                                    max_tokens=48)):
            served = _ask(pool.backend("small"), dataclasses.replace(params, repeat_penalty=1.0))
            embedded = _ask(EmbeddedBackend("smollm2-135m"), params)
            assert served == embedded and served
    assert not _answers(f"http://127.0.0.1:{port}/v1")
    assert (tmp_path / "workers" / f"smollm2-135m-{port}.log").stat().st_size > 0


def test_a_busy_port_is_one_line_naming_the_fix(tmp_path: Path, _isolated_home: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        with pytest.raises(ConfigError, match=f"port {busy} on 127.0.0.1 is in use"), \
                serving("tiny", tmp_path / "w", port=busy):
            pass


def test_a_port_left_in_time_wait_by_a_stopped_server_is_free() -> None:
    """train-global's workers start on the port train-cf's just left: the rehearsal found them refused for a
    minute, the server's closed connections holding the port in TIME_WAIT."""
    import socket

    from lemon.llm.serve import _check_port_free

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            conn, _ = server.accept()
            conn.close()  # the server side closes first: its end of the connection stays in TIME_WAIT
            client.recv(1)
    _check_port_free(port)


def test_one_worker_per_distinct_model() -> None:
    workers = plan_workers(read_pool_config("cpu"), port=9000)
    assert [(w.levels, w.port) for w in workers] == [(("small",), 9000), (("medium",), 9001), (("large",), 9002)]
    (tiny,) = plan_workers(read_pool_config("tiny"), port=9000)
    assert tiny.levels == ("small", "medium", "large") and tiny.alias == "smollm2-135m"
