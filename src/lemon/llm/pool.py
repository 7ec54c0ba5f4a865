"""Capacity pools: an ordered list of capacity levels, each served by a backend.

A spec names levels (`small`, `medium`, `large`); the pool decides which model runs each. Levels are ordered
weakest first, which is what the "lower one capacity" counterfactual edit steps along.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from lemon.llm.base import Backend, GenParams

if TYPE_CHECKING:
    from lemon.llm.cache import SQLiteCache


@dataclass(frozen=True, slots=True)
class Level:
    name: str
    backend: Backend
    # Calls in flight at once for this level (the runtime holds a semaphore per level).
    concurrency: int = 1


@dataclass
class Pool:
    """A named set of capacity levels, weakest first, plus default generation parameters."""

    name: str
    levels: tuple[Level, ...]
    defaults: GenParams = field(default_factory=GenParams)
    # What it was loaded from (a built-in pool's name or a pool file's path; "" for one built in code): a run's
    # trace records it, so `lemon explain TRACE` loads the same pool again.
    ref: str = ""
    # The LLM cache in front of its levels (None under --no-cache) and whether it answers from it alone: a
    # trained orchestrator sends its own requests through the same cache, so a run banks its specs too.
    cache: SQLiteCache | None = None
    offline: bool = False

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(lv.name for lv in self.levels)

    def params(self, *, temperature: float | None = None, max_tokens: int | None = None) -> GenParams:
        """The pool's default generation parameters with the given overrides applied; None keeps the default.

        The one place that merges "pool defaults plus command-line overrides", so every caller (eval, explain,
        run, training rollouts) samples workers the same way for the same options.
        """
        params = self.defaults if temperature is None else replace(self.defaults, temperature=temperature)
        return params if max_tokens is None else replace(params, max_tokens=max_tokens)

    def level(self, name: str) -> Level:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(name)

    def backend(self, level: str) -> Backend:
        return self.level(level).backend

    def lower(self, level: str) -> str | None:
        """The next weaker level, or None if `level` is already the weakest."""
        names = self.level_names
        i = names.index(level)
        return names[i - 1] if i > 0 else None

    def _distinct(self, levels: tuple[str, ...] | None = None) -> list[Backend]:
        seen: dict[int, Backend] = {}
        for lv in self.levels:
            if levels is None or lv.name in levels:
                seen.setdefault(id(lv.backend), lv.backend)
        return list(seen.values())

    async def prepare(self, levels: tuple[str, ...] | None = None) -> None:
        """Verify and load the models behind `levels` (default: all), so a bad file fails before a run."""
        for backend in self._distinct(levels):
            await backend.prepare()

    async def aclose(self) -> None:
        """Close each distinct backend once (levels may share one)."""
        for backend in self._distinct():
            await backend.aclose()
