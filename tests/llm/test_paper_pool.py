"""The packaged `paper-vllm` pool (Qwen2.5-7B/14B/32B behind three vLLM servers) against three OpenAI-compatible
TEST DOUBLES on 127.0.0.1 (`tests.llm.servers.fault_server`), reached through the pool's URL variables."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from lemon.errors import ConfigError
from lemon.llm.pools import load_pool, read_pool_config
from lemon.runtime import Executor
from lemon.spec.model import Agent, Spec
from lemon.spec.roles import RoleLibrary
from tests.llm.servers import Fault, completion, fault_server

MODELS = {"small": "Qwen/Qwen2.5-7B-Instruct", "medium": "Qwen/Qwen2.5-14B-Instruct",
          "large": "Qwen/Qwen2.5-32B-Instruct"}
ENV = {"small": "LEMON_VLLM_SMALL_URL", "medium": "LEMON_VLLM_MEDIUM_URL", "large": "LEMON_VLLM_LARGE_URL"}

TEAM = Spec(agents=(
    Agent(name="solver", role="math_solver", duty="Solve it step by step.", capacity="small"),
    Agent(name="alt", role="math_solver", duty="Solve it another way.", capacity="medium"),
    Agent(name="judge", role="critic", duty="Check both and answer.", capacity="large",
          depends_on=("solver", "alt")),
), output="judge")


def test_the_paper_pool_maps_levels_to_the_three_qwen_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV.values():
        monkeypatch.delenv(var, raising=False)
    cfg = read_pool_config("paper-vllm")
    assert [(lv.name, lv.model) for lv in cfg.levels] == list(MODELS.items())
    assert [lv.base_url for lv in cfg.levels] == [f"http://127.0.0.1:{p}/v1" for p in (8001, 8002, 8003)]
    assert all(lv.schema_style == "openai" and not lv.extensions for lv in cfg.levels)


async def test_one_spec_runs_through_the_paper_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    with ExitStack() as stack:
        servers = {}
        for level in MODELS:
            ep = stack.enter_context(fault_server(
                lambda body, n, level=level: Fault(200, completion(f"{level} says: The answer is 42."))))
            monkeypatch.setenv(ENV[level], ep.base_url)
            servers[level] = ep
        pool = load_pool("paper-vllm", cache=False)
        try:
            result = await Executor(pool, RoleLibrary.load()).run(TEAM, "What is 6 * 7?")
        finally:
            await pool.aclose()
    assert result.status == "ok" and result.calls == 3
    assert result.answer.startswith("large says")
    for level, ep in servers.items():
        assert [body["model"] for _, body in ep.received] == [MODELS[level]]  # each level hit its own server
        assert not {"grammar", "repeat_penalty"} & set(ep.received[0][1])  # no llama.cpp extensions
    judge_prompt = servers["large"].received[0][1]["messages"][-1]["content"]
    assert "small says" in judge_prompt and "medium says" in judge_prompt


def test_a_bad_url_in_the_environment_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEMON_VLLM_MEDIUM_URL", "file:///etc/passwd")
    with pytest.raises(ConfigError, match=r"level 'medium': environment variable LEMON_VLLM_MEDIUM_URL") as err:
        read_pool_config("paper-vllm")
    assert "\n" not in str(err.value)
