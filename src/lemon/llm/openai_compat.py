"""Any OpenAI-compatible endpoint (vLLM, llama.cpp server, Ollama, OpenAI) behind the backend seam.

Bounded concurrency per backend, a per-call timeout, and retries with exponential backoff on TRANSIENT
errors only (connection failures, timeouts, 429, 5xx); a bad request or a wrong key fails at once. A request
with a JSON schema is translated into the form the target accepts: llama.cpp's server takes
`response_format={"type": "json_object", "schema": S}` and rejects OpenAI's `json_schema` form (models.md).

The transport is aiohttp, not the openai SDK: we use one endpoint of the API and return its JSON as is,
and the SDK's request machinery cost 2.6 ms of CPU per call against 0.65 ms for aiohttp (measured on the
2-core build machine against a local server). At concurrency 8 that CPU, not the endpoint, capped an
evaluation's throughput (benchmarks/bench_eval.py, P7).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any, Literal

import aiohttp

from lemon.errors import BackendError, ConfigError
from lemon.llm.base import ChatRequest, Completion

log = logging.getLogger(__name__)

SchemaStyle = Literal["llama_cpp", "openai"]


class _Transient(Exception):
    """A failure worth retrying: no connection, a timeout, HTTP 429 or 5xx."""

    def __init__(self, what: str, hint: str) -> None:
        super().__init__(what)
        self.what, self.hint = what, hint


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
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._concurrency = concurrency
        self._sem = asyncio.Semaphore(concurrency)
        # One session per event loop (aiohttp sessions are bound to the loop that created them).
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}

    @property
    def model_id(self) -> str:
        return f"openai:{self.base_url}#{self.model}"

    def request_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        """The chat-completion arguments for `request`; `extra_body` holds the non-OpenAI extensions."""
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
        body = self.request_kwargs(request)
        body.update(body.pop("extra_body", {}))
        payload = json.dumps(body).encode()
        async with self._sem:
            for attempt in range(self.max_retries + 1):
                start = time.perf_counter()
                try:
                    out = await self._post(payload)
                    break
                except _Transient as exc:
                    if attempt == self.max_retries:
                        raise BackendError(f"endpoint {self.base_url} {exc.what} after {attempt + 1} attempt(s) "
                                           f"({exc.hint})") from None
                    delay = self.backoff_s * 2**attempt
                    log.warning("%s: %s; retry %d in %.1fs", self.base_url, exc.what, attempt + 1, delay)
                    await asyncio.sleep(delay)
        choices = out.get("choices") or [{}]
        usage = out.get("usage") or {}
        text = (choices[0].get("message") or {}).get("content") or ""
        return Completion(text, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                          time.perf_counter() - start, self.model_id)

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=self._concurrency)
            session = self._sessions[loop] = aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                                                   headers=self._headers)
        return session

    async def _post(self, payload: bytes) -> dict[str, Any]:
        """POST /chat/completions once; `_Transient` for what a retry may fix, `BackendError` for the rest."""
        try:
            async with self._session().post(self._url, data=payload) as response:
                raw = await response.read()
                status = response.status
        except TimeoutError:
            raise _Transient("timed out", "raise timeout_s in the pool file or check the server's load") from None
        except aiohttp.ClientConnectionError as exc:
            raise _Transient("cannot be reached",
                             f"connection refused or no route; is the server running? {type(exc).__name__}") from None
        if status == 429 or status >= 500:
            raise _Transient("kept failing", f"HTTP {status}: {_error_message(raw)}")
        if status >= 400:
            raise BackendError(f"{self.base_url} refused the request (HTTP {status}): {_error_message(raw)}")
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise BackendError(f"{self.base_url} answered with something that is not a chat completion: "
                               f"{_short(raw.decode(errors='replace'))}")
        return data

    async def prepare(self) -> None:
        return None  # connectivity is checked by the first call, with retries

    async def aclose(self) -> None:
        sessions, self._sessions = self._sessions, {}
        current = asyncio.get_running_loop()
        for loop, session in sessions.items():
            if loop is current and not session.closed:  # a session of a finished loop cannot be awaited
                await session.close()


def _error_message(raw: bytes) -> str:
    """The `error.message` of an OpenAI-style error body, else the body itself, shortened."""
    try:
        data = json.loads(raw)
        message = data["error"]["message"] if isinstance(data.get("error"), dict) else data.get("error", data)
    except (ValueError, AttributeError, KeyError, TypeError):
        message = raw.decode(errors="replace")
    return _short(str(message))


def _short(text: str, n: int = 200) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= n else one[:n] + "…"
