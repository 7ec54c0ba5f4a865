"""Any OpenAI-compatible endpoint (vLLM, llama.cpp server, Ollama, OpenAI) behind the backend seam.

Bounded concurrency per backend, a per-call timeout, and retries with exponential backoff on TRANSIENT
errors only (connection failures, timeouts, 429, 5xx); a bad request or a wrong key fails at once. A request
with a JSON schema is translated into the form the target accepts: llama.cpp's server takes
`response_format={"type": "json_object", "schema": S}` and rejects OpenAI's `json_schema` form (models.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Literal

import openai

from lemon.errors import BackendError, ConfigError
from lemon.llm.base import ChatRequest, Completion

log = logging.getLogger(__name__)

SchemaStyle = Literal["llama_cpp", "openai"]
_TRANSIENT = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
              openai.InternalServerError)


class OpenAIBackend:
    """Chat completions against `base_url` for `model`; the API key comes from an environment variable."""

    def __init__(self, base_url: str, model: str, *, api_key_env: str | None = None, concurrency: int = 4,
                 timeout_s: float = 120.0, max_retries: int = 3, backoff_s: float = 0.5,
                 schema_style: SchemaStyle = "llama_cpp", extensions: bool = True) -> None:
        key = "not-needed"
        if api_key_env:
            key = os.environ.get(api_key_env, "")
            if not key:
                raise ConfigError(f"environment variable {api_key_env} (the API key for {base_url}) is not set")
        self.base_url = base_url
        self.model = model
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.schema_style = schema_style
        self.extensions = extensions  # llama.cpp / vLLM sampling extensions (repeat_penalty, grammar)
        # A plain-http endpoint (a local server) needs no TLS context; building one costs ~0.5 s per pool.
        http_client = openai.DefaultAsyncHttpxClient(verify=False) if base_url.startswith("http://") else None
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=key, timeout=timeout_s, max_retries=0,
                                          http_client=http_client)
        self._sem = asyncio.Semaphore(concurrency)

    @property
    def model_id(self) -> str:
        return f"openai:{self.base_url}#{self.model}"

    def request_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        """The `chat.completions.create` arguments for `request` (public for tests)."""
        p = request.params
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "temperature": p.temperature,
            "top_p": p.top_p,
            "max_tokens": p.max_tokens,
        }
        if p.seed is not None:
            kwargs["seed"] = p.seed
        if p.stop:
            kwargs["stop"] = list(p.stop)
        extra: dict[str, Any] = {}
        if request.json_schema is not None:
            if self.schema_style == "openai":
                kwargs["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "spec", "schema": request.json_schema, "strict": False}}
            else:
                kwargs["response_format"] = {"type": "json_object", "schema": request.json_schema}
        if self.extensions:
            if request.grammar is not None:
                extra["grammar"] = request.grammar
            if p.repeat_penalty is not None:
                extra["repeat_penalty"] = p.repeat_penalty
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    async def complete(self, request: ChatRequest) -> Completion:
        kwargs = self.request_kwargs(request)
        async with self._sem:
            for attempt in range(self.max_retries + 1):
                start = time.perf_counter()
                try:
                    out = await self._post(kwargs)
                    break
                except _TRANSIENT as exc:
                    if attempt == self.max_retries:
                        raise BackendError(self._describe(exc, attempt + 1)) from None
                    delay = self.backoff_s * 2**attempt
                    log.warning("%s: %s; retry %d in %.1fs", self.base_url, type(exc).__name__, attempt + 1, delay)
                    await asyncio.sleep(delay)
                except openai.APIStatusError as exc:
                    raise BackendError(f"{self.base_url} refused the request (HTTP {exc.status_code}): "
                                       f"{_short(exc.message)}") from None
        choices = out.get("choices") or [{}]
        usage = out.get("usage") or {}
        text = (choices[0].get("message") or {}).get("content") or ""
        return Completion(text, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                          time.perf_counter() - start, self.model_id)

    async def _post(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """POST /chat/completions through the SDK's documented raw-request path.

        The SDK's typed `create` re-validates every request and response (~15 ms of CPU per call, measured),
        which caps throughput at high concurrency; the raw path keeps its auth, base URL, timeouts and error
        types and returns the JSON as is.
        """
        body = dict(kwargs)
        body.update(body.pop("extra_body", {}))
        data = await self._client.post("/chat/completions", body=body, cast_to=object)
        if not isinstance(data, dict):
            raise BackendError(f"{self.base_url} answered with something that is not a chat completion: "
                               f"{_short(str(data))}")
        return data

    def _describe(self, exc: Exception, attempts: int) -> str:
        if isinstance(exc, openai.APITimeoutError):
            what, hint = "timed out", "raise timeout_s in the pool file or check the server's load"
        elif isinstance(exc, openai.APIConnectionError):
            what, hint = "cannot be reached", "connection refused or no route; is the server running?"
        else:
            what, hint = "kept failing", type(exc).__name__
        return f"endpoint {self.base_url} {what} after {attempts} attempt(s) ({hint})"

    async def prepare(self) -> None:
        return None  # connectivity is checked by the first call, with retries

    async def aclose(self) -> None:
        await self._client.close()


def _short(text: str, n: int = 200) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= n else one[:n] + "…"
