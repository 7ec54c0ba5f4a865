"""The one seam for model backends: a chat request in, a completion with token counts out.

Every backend (embedded llama.cpp, any OpenAI-compatible endpoint, the scripted test double) implements
`Backend.complete`; those that can also score a given reply under their model (embedded llama.cpp, the LLM
cache in front of one, the scripted double) implement `Scorer.score` too, a separate protocol so that a
Backend (and every test double of one) owes nothing new. Requests are immutable and hashable-by-content
(`request_key`), which is what both the persistent LLM cache and the runtime's node cache are keyed on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from lemon.errors import BackendError, ConfigError

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True, slots=True)
class GenParams:
    """Generation parameters. `seed` only matters when temperature > 0."""

    temperature: float = 0.0
    max_tokens: int = 256
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    repeat_penalty: float | None = None

    def __post_init__(self) -> None:
        # 0 or a negative count means "unlimited" to some servers (llama.cpp: -1): never what a caller meant.
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be a positive integer, got {self.max_tokens!r}; "
                              "fix --max-tokens or the pool's defaults")

    @property
    def deterministic(self) -> bool:
        """True when the same request always yields the same text (greedy, or sampled with a seed)."""
        return self.temperature == 0.0 or self.seed is not None

    def canonical(self) -> dict[str, Any]:
        """A dict for hashing: the seed is dropped for greedy decoding, where it changes nothing."""
        d = asdict(self)
        d["stop"] = list(self.stop)
        if self.temperature == 0.0:
            d["seed"] = None
        return d


@dataclass(frozen=True, slots=True)
class ChatRequest:
    messages: tuple[Message, ...]
    params: GenParams = field(default_factory=GenParams)
    # A bounded JSON schema the output must follow (constrained decoding where the backend supports it).
    json_schema: dict[str, Any] | None = None
    # A GBNF grammar (llama.cpp backends only).
    grammar: str | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    model: str
    cached: bool = False
    # The sum of the reply's sampled tokens' log-probabilities under the raw logits, read from the generation
    # itself (embedded llama.cpp; an OpenAI-compatible server's `logprobs`), or from the LLM cache's scores for a
    # banked reply; None where the backend gave none. A stop rule's logprob gate uses it instead of a scoring pass.
    logprob: float | None = None

    def __post_init__(self) -> None:
        # The backstop for every backend (and the LLM cache): costs are sums of these, so a negative or
        # non-integer count would corrupt every total it reaches.
        for n in (self.prompt_tokens, self.completion_tokens):
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise BackendError(f"{self.model}: reported a token count of {n!r}; token counts are "
                                   "non-negative integers (check the backend)")
        if not isinstance(self.text, str):
            raise BackendError(f"{self.model}: replied with {type(self.text).__name__}, not text")
        if self.logprob is not None and (isinstance(self.logprob, bool) or not isinstance(self.logprob, float)
                                         or not -1e9 < self.logprob <= 1e-6):
            raise BackendError(f"{self.model}: reported a reply log-probability of {self.logprob!r}; it is a "
                               "finite sum of log-probabilities, at most 0 (check the backend)")

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def request_key(model_id: str, request: ChatRequest) -> str:
    """Content hash of (model, messages, parameters, constraints): the cache key for a call."""
    payload = {
        "model": model_id,
        "messages": [[m.role, m.content] for m in request.messages],
        "params": request.params.canonical(),
        "schema": request.json_schema,
        "grammar": request.grammar,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@runtime_checkable
class Backend(Protocol):
    """A model endpoint. Implementations bound their own concurrency and are safe to call concurrently."""

    @property
    def model_id(self) -> str:
        """Stable identity of the model behind this backend (part of every cache key)."""
        ...

    async def complete(self, request: ChatRequest) -> Completion: ...

    async def prepare(self) -> None:
        """Make the model ready (verify and load files); raises a `LemonError` that names the fix."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Scorer(Protocol):
    """A backend that scores a given reply under its model (a stop rule's `logprob` gate asks it)."""

    async def score(self, request: ChatRequest, reply: str) -> float:
        """The sum of `reply`'s token log-probabilities (natural log) after `request`'s messages, teacher-forced
        under the raw logits: the request's sampling parameters (temperature, seed) do not matter."""
        ...


def can_score(backend: object) -> bool:
    """Whether `backend` gives each reply's log-probability: it reads them from the generation (`reads_logprobs`:
    embedded llama.cpp; an OpenAI-compatible level whose pool says `logprobs: true`), or it is a `Scorer`; for a
    wrapper (the LLM cache: its `inner`), the wrapped backend does."""
    if getattr(backend, "reads_logprobs", False) is True:
        return True
    if not isinstance(backend, Scorer):
        return False
    inner = getattr(backend, "inner", None)
    return inner is None or can_score(inner)
