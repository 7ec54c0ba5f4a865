"""The node cache: an agent whose model, full prompt (parents' outputs included) and parameters are unchanged
is never recomputed.

This is what keeps counterfactual re-runs cheap: after editing one field, only the edited agent and its
descendants see a different prompt, so only they call a model. Concurrent requests for the same key share
one computation (in-flight deduplication), so identical greedy agents in one run also cost one call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NodeOutput:
    text: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    llm_cached: bool = False
    reply: str | None = None  # what the model wrote, where `text` adds to it (a program agent's result)
    logprob: float | None = None  # the reply's log-probability, as the backend read it from the generation

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class NodeCache:
    """In-memory map node key -> output; share one instance across re-runs of edits of the same task."""

    def __init__(self) -> None:
        self._done: dict[str, NodeOutput] = {}
        self._inflight: dict[str, asyncio.Future[NodeOutput]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._done)

    def __contains__(self, key: str) -> bool:
        return key in self._done

    def prime(self, key: str, output: NodeOutput) -> None:
        """Record an output computed earlier (e.g. read from a stored trace), so re-runs that reach the same
        request reuse it instead of calling a model: `lemon explain` replays a finished run this way."""
        self._done[key] = output

    async def get_or_compute(self, key: str, compute: Callable[[], Awaitable[NodeOutput]]) -> tuple[NodeOutput, bool]:
        """(output, hit): the stored output, a computation already in flight, or a new one."""
        if (done := self._done.get(key)) is not None:
            self.hits += 1
            return done, True
        if (pending := self._inflight.get(key)) is not None:
            self.hits += 1
            return await asyncio.shield(pending), True
        self.misses += 1
        fut: asyncio.Future[NodeOutput] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            out = await compute()
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # mark retrieved: waiters (if any) re-raise it themselves
            raise
        finally:
            self._inflight.pop(key, None)
        self._done[key] = out
        fut.set_result(out)
        return out, False
