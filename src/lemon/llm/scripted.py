"""A deterministic test double backend.

Named as what it is: a scripted fake for unit tests of control flow and for runtime benchmarks. Its reply is
a pure function of (model id, request), so the node cache and counterfactual re-runs behave exactly as with a
real greedy model, and a configurable latency simulates a remote call. It is a `Scorer` too, and its score of
a reply is a pure function as well (default: minus the reply's whitespace tokens; no model is asked).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from lemon.llm.base import ChatRequest, Completion, Message

Responder = Callable[[ChatRequest], str]
ReplyScorer = Callable[[ChatRequest, str], float]


def _default_reply(model_id: str, request: ChatRequest) -> str:
    digest = hashlib.sha256(
        (model_id + "\x00" + "\x00".join(m.content for m in request.messages)).encode()
    ).hexdigest()[:12]
    return f"[{model_id}] answer {digest}"


def count_tokens(text: str) -> int:
    """Whitespace token count: crude, but deterministic and proportional to length."""
    return len(text.split())


class ScriptedBackend:
    """Replies with `responder(request)` (default: a hash of the prompt) after `latency_s` seconds."""

    def __init__(
        self,
        model_id: str = "scripted",
        *,
        latency_s: float = 0.0,
        responder: Responder | None = None,
        max_concurrency: int | None = None,
        hold_file: str | None = None,
        hold_after_calls: int = 0,
        scorer: ReplyScorer | None = None,
    ) -> None:
        self._model_id = model_id
        self.latency_s = latency_s
        # Tests that must interrupt a run mid-way wait for a state, not for time: after `hold_after_calls`
        # calls, a call waits while `hold_file` exists, so the run cannot finish before the test acts.
        self._hold = (Path(hold_file), hold_after_calls) if hold_file else None
        self._responder = responder
        self._sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.calls: list[ChatRequest] = []
        self._scorer = scorer
        self.scored: list[tuple[ChatRequest, str]] = []  # every score asked of the double, in order

    @property
    def model_id(self) -> str:
        return self._model_id

    async def complete(self, request: ChatRequest) -> Completion:
        if self._sem is None:
            return await self._complete(request)
        async with self._sem:
            return await self._complete(request)

    async def _complete(self, request: ChatRequest) -> Completion:
        start = time.perf_counter()
        self.calls.append(request)
        if self._hold is not None and len(self.calls) > self._hold[1]:
            while self._hold[0].exists():
                await asyncio.sleep(0.02)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = self._responder(request) if self._responder else _default_reply(self._model_id, request)
        prompt_tokens = sum(count_tokens(m.content) for m in request.messages)
        completion_tokens = min(count_tokens(text), request.params.max_tokens)
        return Completion(text, prompt_tokens, completion_tokens, time.perf_counter() - start, self._model_id)

    async def score(self, request: ChatRequest, reply: str) -> float:
        """`scorer(request, reply)`, default minus the reply's whitespace token count (shorter: surer): a
        test double's stand-in for a teacher-forced log-probability, not one."""
        self.scored.append((request, reply))
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return float(self._scorer(request, reply)) if self._scorer else -float(count_tokens(reply))

    async def prepare(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


__all__ = ["Message", "ScriptedBackend", "count_tokens"]
