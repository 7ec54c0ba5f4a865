"""Fixtures for the evaluation harness tests: benchmark data, an isolated LEMON_HOME, scripted pools."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.pool import Pool
from lemon.llm.scripted import ScriptedBackend
from tests.pools import CountingBackend, scripted_pool

__all__ = ["CountingBackend"]  # re-exported: the evaluation tests import it from here


def eval_pool(backend: ScriptedBackend, *, concurrency: int = 64) -> Pool:
    """All three levels served by `backend`, each allowing `concurrency` calls (the eval is the bound)."""
    return scripted_pool(backend, concurrency=concurrency, defaults=GenParams(max_tokens=64))


def oracle_responder(answers: dict[str, str]) -> Callable[[ChatRequest], str]:
    """Replies 'The answer is X.' with the gold answer of whichever question appears in the prompt."""

    def reply(request: ChatRequest) -> str:
        text = "\n".join(m.content for m in request.messages)
        for question, answer in answers.items():
            if question in text:
                return f"Let me compute. The answer is {answer}."
        return "I do not know."

    return reply


class Crash(RuntimeError):
    """Stands in for the process dying mid-run."""


def crashing_after(n_calls: int, latency_s: float = 0.0) -> ScriptedBackend:
    """A backend that answers `n_calls` times, then raises (like a crash in the middle of a run)."""
    count = {"n": 0}

    def reply(request: ChatRequest) -> str:
        count["n"] += 1
        if count["n"] > n_calls:
            raise Crash("simulated crash")
        return "The answer is 1."

    return ScriptedBackend("scripted", latency_s=latency_s, responder=reply)


def run(coro):  # type: ignore[no-untyped-def]
    """asyncio.run for the synchronous tests."""
    return asyncio.run(coro)
