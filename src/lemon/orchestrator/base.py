"""The orchestrator interface: a task in, ONE validated spec out, with how it was obtained.

The prompted orchestrator and the trained policy both implement `Orchestrator`, so the CLI, the benchmark
harness and the trainer never care which one wrote the spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from lemon.spec.model import Spec

Source = Literal["model", "repaired", "fallback", "template"]


@dataclass(frozen=True)
class Proposal:
    """A spec and its provenance: `model` (valid as written), `repaired` or `fallback` (with warnings)."""

    spec: Spec
    source: Source
    raw: str
    warnings: tuple[str, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Orchestrator(Protocol):
    """Writes one spec per task. `level` is the pool level it calls (None: it calls none of the pool's, so
    nothing needs loading before it proposes)."""

    @property
    def level(self) -> str | None: ...

    async def propose(self, task: str, *, seed: int = 0) -> Proposal: ...

    def token_bound(self, task: str) -> int:
        """The most tokens one proposal for `task` can cost (a bound on its prompt plus its generation limit;
        0 when it calls no model), so a whole-run token budget can be checked before it is asked."""
        ...

    async def aclose(self) -> None: ...
