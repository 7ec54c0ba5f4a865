"""The tests' scripted pools: the three capacity levels every test spec names, served by a test double."""

from __future__ import annotations

from collections.abc import Mapping

from lemon.llm.base import Backend, ChatRequest, Completion, GenParams
from lemon.llm.pool import Level, Pool
from lemon.llm.scripted import ScriptedBackend

LEVELS = ("small", "medium", "large")


def scripted_pool(backend: Backend, *, concurrency: int = 64, name: str = "scripted",
                  defaults: GenParams | None = None) -> Pool:
    """Every level of LEVELS served by `backend` (a test double), each allowing `concurrency` calls at once."""
    return Pool(name, tuple(Level(n, backend, concurrency) for n in LEVELS), defaults or GenParams())


def pool_of(backends: Mapping[str, Backend], *, concurrency: int = 4, name: str = "scripted",
            defaults: GenParams | None = None) -> Pool:
    """One level per (name, backend) of `backends`, in their order: levels served by different test doubles."""
    return Pool(name, tuple(Level(n, b, concurrency) for n, b in backends.items()), defaults or GenParams())


class CountingBackend(ScriptedBackend):
    """A scripted backend that records the largest number of calls in flight at once."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(self, request: ChatRequest) -> Completion:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await super().complete(request)
        finally:
            self.in_flight -= 1
