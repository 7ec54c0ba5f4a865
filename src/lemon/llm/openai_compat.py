"""Any OpenAI-compatible endpoint (vLLM, llama.cpp server, Ollama, OpenAI) behind the backend seam.

Bounded concurrency per backend, a per-call timeout, and retries with exponential backoff on TRANSIENT
errors only (a dropped connection, timeouts, 429, 5xx), waiting at least what the server's `Retry-After` asks
(and failing at once when it asks for more than `max_retry_after_s`); a bad request, a wrong key or a refused
connection (nothing listens there: waiting does not start a server) fails at once. An endpoint is not trusted:
the body is read with a byte cap (`max_body_bytes`) and every reply is validated (`ChatReply`) before anything
uses it, so a wrong shape, a non-string content or a negative / NaN / string token count is a `BackendError`
for that one call, never a traceback and never a negative cost; so is a reply that is not valid HTTP (any
aiohttp client error) and a redirect, which is never followed (a 307 would resend the prompt wherever it
points, another origin included). A request
with a JSON schema is translated into the form the target accepts: llama.cpp's server takes
`response_format={"type": "json_object", "schema": S}` and rejects OpenAI's `json_schema` form (models.md).

A silent endpoint (one that accepts connections and never answers) used to hold `lemon run` for timeout x
attempts, 8 minutes by default, with one "retry" line every 2 minutes. Now an endpoint must answer SOMETHING
within `first_byte_s` (10 s): the TCP connect of every call, and a `GET base_url` probe before the first call
and after every timed-out attempt (any HTTP status counts, a 404 included: the server is there; not
`/models`, which llama_cpp.server answers only between generations). A non-streamed completion sends its
first byte only when it is done, so the completion itself keeps the full `timeout_s`; while calls run long,
a notice (at most one per `notice_s`) says how long one has waited, of what: timeout, attempt, the most
all attempts can take.

The transport is aiohttp, not the openai SDK: we use one endpoint of the API and return its JSON as is,
and the SDK's request machinery cost 2.6 ms of CPU per call against 0.65 ms for aiohttp (measured on the
2-core build machine against a local server). At concurrency 8 that CPU, not the endpoint, capped an
evaluation's throughput (benchmarks/bench_eval.py, P7).
"""

from __future__ import annotations

import asyncio
import email.utils
import errno
import json
import logging
import math
import os
import time
from collections.abc import Coroutine
from datetime import UTC
from typing import Annotated, Any, Literal, TypeGuard

import aiohttp
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from lemon.errors import BackendError, ConfigError
from lemon.llm.base import ChatRequest, Completion

log = logging.getLogger(__name__)

SchemaStyle = Literal["llama_cpp", "openai"]

# A chat completion of a few thousand tokens is tens of kB; 8 MB is far above any honest reply and far below
# what would hurt the process (a hostile endpoint sent 1.5 GB, read whole: 4.2 GB RSS).
MAX_BODY_BYTES = 8 * 1024 * 1024
# Error bodies are only quoted in a one-line message: the first 64 kB are plenty.
MAX_ERROR_BODY_BYTES = 64 * 1024
# The longest `Retry-After` we wait for; a server asking for more fails the call at once (we neither ignore
# its request nor hang an evaluation on it).
MAX_RETRY_AFTER_S = 60.0
# An endpoint must connect and answer the liveness probe within this (seconds), or it is silent.
FIRST_BYTE_S = 10.0
# A probe still unanswered after this many seconds is announced (most endpoints answer in milliseconds).
PROBE_NOTICE_S = 2.0
# While a completion runs long, a notice every this many seconds (at least) says what is being waited for.
WAIT_NOTICE_S = 30.0
# Larger counts than this are not token counts (no context window is that long).
MAX_TOKEN_COUNT = 2**31 - 1


def _token_count(value: Any) -> int:
    """A JSON token count: an integer (or an integral float such as 7.0); not bool, NaN, inf or a string."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a token count must be a number, got {type(value).__name__}")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ValueError(f"a token count must be a whole number, got {value!r}")
        return int(value)
    return value


TokenCount = Annotated[int, BeforeValidator(_token_count), Field(ge=0, le=MAX_TOKEN_COUNT)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ReplyMessage(_Model):
    # Strict: a list of content parts, a number or an object is not text this runtime can use.
    content: Annotated[str | None, Field(strict=True)] = None


class TokenLogprob(_Model):
    logprob: Annotated[float, Field(strict=False, allow_inf_nan=False, le=1e-6, ge=-1e6)]


class ReplyLogprobs(_Model):
    content: Annotated[list[TokenLogprob] | None, Field(max_length=1 << 20)] = None


class ReplyChoice(_Model):
    message: ReplyMessage
    finish_reason: Annotated[str | None, Field(strict=True, max_length=64)] = None
    logprobs: ReplyLogprobs | None = None


class ReplyUsage(_Model):
    prompt_tokens: TokenCount = 0
    completion_tokens: TokenCount = 0


class ChatReply(_Model):
    """The part of an OpenAI chat completion LEMON reads, validated: at least one choice whose content is a
    string (or null), and token counts that are non-negative whole numbers. Usage may be absent (counted 0)."""

    choices: list[ReplyChoice] = Field(min_length=1)
    usage: ReplyUsage | None = None

    @property
    def text(self) -> str:
        return self.choices[0].message.content or ""

    @property
    def logprob(self) -> float | None:
        """The reply's summed token log-probabilities, when the server sent them (`logprobs: true`)."""
        found = self.choices[0].logprobs
        if found is None or found.content is None:
            return None
        return float(sum(t.logprob for t in found.content))


def parse_reply(raw: bytes, where: str) -> ChatReply:
    """`raw` as a validated `ChatReply`, or a one-line `BackendError` naming what is wrong with it."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or an integer over Python's digit limit
        data = None
    if not isinstance(data, dict):
        raise BackendError(f"{where} answered with something that is not a chat completion: "
                           f"{_short(raw[:4096].decode(errors='replace'))}")
    try:
        return ChatReply.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "reply"
        raise BackendError(f"{where} sent a malformed chat completion: {loc}: {_short(err['msg'], 120)} "
                           f"(got {_short(repr(err.get('input')), 60)}); check the server and its model") from None


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds asked for by a `Retry-After` header (delta-seconds or an HTTP date); None if absent or unreadable."""
    if not value or len(value) > 64:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


class _Transient(Exception):
    """A failure worth retrying: no connection, a timeout, HTTP 429 or 5xx (with the server's Retry-After)."""

    def __init__(self, what: str, hint: str, retry_after: float | None = None) -> None:
        super().__init__(what)
        self.what, self.hint, self.retry_after = what, hint, retry_after


class OpenAIBackend:
    """Chat completions against `base_url` for `model`; the API key comes from an environment variable."""

    def __init__(self, base_url: str, model: str, *, api_key_env: str | None = None, concurrency: int = 4,
                 timeout_s: float = 120.0, max_retries: int = 3, backoff_s: float = 0.5,
                 schema_style: SchemaStyle = "llama_cpp", extensions: bool = True,
                 max_body_bytes: int = MAX_BODY_BYTES, max_retry_after_s: float = MAX_RETRY_AFTER_S,
                 first_byte_s: float = FIRST_BYTE_S, notice_s: float | None = None, logprobs: bool = False) -> None:
        key = "not-needed"
        if api_key_env:
            key = os.environ.get(api_key_env, "")
            if not key:
                raise ConfigError(f"environment variable {api_key_env} (the API key for {base_url}) is not set")
        self.base_url = base_url
        self.model = model
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_body_bytes = max_body_bytes
        self.max_retry_after_s = max_retry_after_s
        self.schema_style = schema_style
        self.extensions = extensions  # llama.cpp / vLLM sampling extensions (repeat_penalty, grammar)
        # ask for each reply's token log-probabilities (a stop rule's gate reads them; llama-server and vLLM
        # give them, llama_cpp.server does not): a reply without them is then a one-line error
        self.reads_logprobs = logprobs
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.timeout_s, self.first_byte_s = timeout_s, min(first_byte_s, timeout_s)
        self.notice_s = notice_s if notice_s is not None else max(WAIT_NOTICE_S, timeout_s / 4)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=self.first_byte_s)
        self._answered = False  # the endpoint answered the probe since the last timed-out attempt
        self._last_notice = -math.inf
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
        if self.reads_logprobs:  # not part of the request's cache key: the same draw, with its log-probabilities
            kwargs["logprobs"], kwargs["top_logprobs"] = True, 1
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
                await self._ensure_answering()
                start = time.perf_counter()
                try:
                    reply = await self._noticed(self._post(payload), attempt)
                    break
                except _Transient as exc:
                    if exc.what == "timed out":
                        self._answered = False  # busy, or gone silent: the probe before the retry tells
                    await self._before_retry(exc, attempt)
        usage = reply.usage or ReplyUsage()
        logprob = reply.logprob
        if self.reads_logprobs and logprob is None:
            raise BackendError(f"{self.model_id}: the server sent no log-probabilities although the level asks for "
                               "them (`logprobs: true`); serve it with llama.cpp's llama-server or vLLM, or set "
                               "`logprobs: false` and drop the gate")
        return Completion(reply.text, usage.prompt_tokens, usage.completion_tokens,
                          time.perf_counter() - start, self.model_id, logprob=min(logprob, 0.0)
                          if logprob is not None else None)

    def _budget(self) -> str:
        """The full wait a call may take, stated: per-attempt timeout, attempts, and the most in all."""
        attempts = self.max_retries + 1
        return (f"timeout {self.timeout_s:g} s x {attempts} attempt(s), at most "
                f"{_duration(self.timeout_s * attempts)} in all")

    async def _ensure_answering(self) -> None:
        """The liveness probe, unless the endpoint answered one since the last timed-out attempt."""
        if not self._answered:
            await self._probe()
            self._answered = True

    async def _probe(self) -> None:
        """GET base_url within `first_byte_s`: any HTTP answer shows the endpoint is there. None is the one-line
        error a silent endpoint gave after every attempt timed out, in seconds instead of minutes. Other
        refused connection is one line at once (nothing listens there); other failures are left to the call,
        which retries what may pass."""
        try:
            await self._noticed_probe()
        except TimeoutError:
            raise BackendError(f"endpoint {self.base_url} timed out: no answer within {self.first_byte_s:g} s "
                               f"(connect and first byte of a GET; a call may take {self._budget()}); is the "
                               "server up and answering at that URL? raise first_byte_s in the pool file if it "
                               "is slow to answer") from None
        except aiohttp.ClientConnectionError as exc:
            if _refused(exc):
                raise self._refused_error(exc) from None
            log.debug("%s: probe failed (%s); the call decides", self.base_url, type(exc).__name__)
        except aiohttp.ClientError as exc:
            log.debug("%s: probe failed (%s); the call decides", self.base_url, type(exc).__name__)

    async def _noticed_probe(self) -> None:
        """The probe's GET; when it has not answered within `PROBE_NOTICE_S`, one line says what is awaited."""
        async def get() -> None:
            async with self._session().get(self.base_url, allow_redirects=False,
                                           timeout=aiohttp.ClientTimeout(total=self.first_byte_s)) as response:
                log.debug("%s answered the probe with HTTP %d", self.base_url, response.status)

        task = asyncio.ensure_future(get())
        try:
            done, _ = await asyncio.wait({task}, timeout=min(PROBE_NOTICE_S, self.first_byte_s / 2))
            if not done:
                log.warning("%s: no answer yet; waiting up to %g s for the endpoint to answer at all",
                            self.base_url, self.first_byte_s)
            await task
        finally:
            task.cancel()

    async def _noticed(self, call: Coroutine[Any, Any, ChatReply], attempt: int) -> ChatReply:
        """`call`, with a notice while it runs long: what is waited for, and for how long at most (one line
        per `notice_s` for the whole backend, however many calls wait)."""
        task = asyncio.ensure_future(call)
        start = time.monotonic()
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.notice_s)
                if done:
                    return task.result()
                now = time.monotonic()
                if now - self._last_notice >= self.notice_s:
                    self._last_notice = now
                    log.warning("%s: still waiting for a completion after %.0f s (attempt %d of %d; %s); the "
                                "endpoint answered a probe, so it is busy or generating", self.base_url,
                                now - start, attempt + 1, self.max_retries + 1, self._budget())
        finally:
            task.cancel()

    async def _before_retry(self, exc: _Transient, attempt: int) -> None:
        """Sleep before the next attempt (backoff, or longer if the server said so); raise if none is left."""
        tries = f"after {attempt + 1} attempt(s)"
        if attempt == self.max_retries:
            budget = f"; {self._budget()}" if exc.what == "timed out" else ""
            raise BackendError(f"endpoint {self.base_url} {exc.what} {tries} ({exc.hint}{budget})") from None
        delay = self.backoff_s * 2**attempt
        if exc.retry_after is not None:
            if exc.retry_after > self.max_retry_after_s:
                raise BackendError(f"endpoint {self.base_url} {exc.what} {tries} and asks to wait "
                                   f"{exc.retry_after:.0f}s (more than {self.max_retry_after_s:.0f}s): "
                                   f"{exc.hint}; try again later or lower the concurrency") from None
            delay = max(delay, exc.retry_after)
        what = f"timed out after {self.timeout_s:g} s" if exc.what == "timed out" else exc.what
        log.warning("%s: %s (attempt %d of %d; %s); retry in %.1f s", self.base_url, what, attempt + 1,
                    self.max_retries + 1, self._budget(), delay)
        await asyncio.sleep(delay)

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=self._concurrency)
            session = self._sessions[loop] = aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                                                   headers=self._headers)
        return session

    async def _post(self, payload: bytes) -> ChatReply:
        """POST /chat/completions once; `_Transient` for what a retry may fix, `BackendError` for the rest.
        Redirects are not followed: a 307/308 would resend the prompt (and the key) wherever it points."""
        try:
            async with self._session().post(self._url, data=payload, allow_redirects=False) as response:
                status = response.status
                if 300 <= status < 400:
                    raise self._redirected(status, response.headers.get("Location"))
                if status >= 400:
                    raw = await _read_capped(response, MAX_ERROR_BODY_BYTES, truncate=True)
                    retry_after = retry_after_s(response.headers.get("Retry-After"))
                else:
                    raw = await _read_capped(response, self.max_body_bytes, truncate=False)
        except TimeoutError:
            raise _Transient("timed out", "raise timeout_s in the pool file or check the server's load") from None
        except aiohttp.ClientConnectionError as exc:
            if _refused(exc):
                raise self._refused_error(exc) from None
            raise _Transient("cannot be reached", "no route, or the connection dropped; is the server running? "
                             f"{type(exc).__name__}") from None
        except aiohttp.ClientPayloadError as exc:
            raise _Transient("sent a broken body", f"{type(exc).__name__}: {_short(str(exc), 80)}") from None
        except aiohttp.ClientError as exc:  # a bad status line, a header over aiohttp's 8 kB, an invalid URL...
            raise BackendError(f"{self.base_url} sent a reply that is not valid HTTP ({type(exc).__name__}: "
                               f"{_short(str(exc), 120)}); check that base_url points at an OpenAI-compatible "
                               "server") from None
        except _TooLarge as exc:
            raise BackendError(f"{self.base_url} sent a reply larger than {self.max_body_bytes} bytes "
                               f"({exc}); not read further, check the server") from None
        if status == 429 or status >= 500:
            raise _Transient("kept failing", f"HTTP {status}: {_error_message(raw)}",
                             retry_after if status in (429, 503) else None)
        if status >= 400:
            raise BackendError(f"{self.base_url} refused the request (HTTP {status}): {_error_message(raw)}")
        return parse_reply(raw, self.base_url)

    def _redirected(self, status: int, location: str | None) -> BackendError:
        """A 3xx, not followed: a completion endpoint has no reason to move, and following one would send the
        prompt to wherever it points (another origin, `file://`); the fix is the address it names."""
        where = _short(location, 120) if location else "nowhere (no Location header)"
        return BackendError(f"{self.base_url} redirected the request (HTTP {status}) to {where}; LEMON does not "
                            "follow redirects: if that is the server's address, set base_url to it")

    def _refused_error(self, exc: aiohttp.ClientConnectorError) -> BackendError:
        """Nothing listens there: not retried (unlike a 503 or a timeout, waiting a second does not start a
        server), and said in one line."""
        return BackendError(f"endpoint {self.base_url} refused the connection (nothing listens at "
                            f"{exc.host}:{exc.port}); start the server, or fix base_url (--base-url or the pool "
                            "file)")

    async def prepare(self) -> None:
        """The liveness probe before anything is shown or paid for (a silent endpoint fails in seconds)."""
        await self._ensure_answering()

    async def aclose(self) -> None:
        sessions, self._sessions = self._sessions, {}
        current = asyncio.get_running_loop()
        for loop, session in sessions.items():
            if loop is current and not session.closed:  # a session of a finished loop cannot be awaited
                await session.close()


def _refused(exc: aiohttp.ClientConnectionError) -> TypeGuard[aiohttp.ClientConnectorError]:
    """A connection refused (ECONNREFUSED; for a host with several addresses, refused on all of them)."""
    os_error = getattr(exc, "os_error", None) if isinstance(exc, aiohttp.ClientConnectorError) else None
    return getattr(os_error, "errno", None) == errno.ECONNREFUSED


class _TooLarge(Exception):
    """A body over the byte cap (the message says how far it got)."""


async def _read_capped(response: aiohttp.ClientResponse, cap: int, *, truncate: bool) -> bytes:
    """The body, read in chunks and never more than `cap` bytes: past it, the first `cap` bytes when
    `truncate`, else `_TooLarge` (leaving the `async with` then closes the connection, unread)."""
    declared = response.content_length
    if declared is not None and declared > cap and not truncate:
        raise _TooLarge(f"Content-Length {declared}")
    buf = bytearray()
    async for chunk in response.content.iter_chunked(1 << 16):
        buf += chunk
        if len(buf) > cap:
            if truncate:
                return bytes(buf[:cap])
            raise _TooLarge(f"more than {cap} bytes received")
    return bytes(buf)


def _error_message(raw: bytes) -> str:
    """The `error.message` of an OpenAI-style error body, else the body itself, shortened."""
    try:
        data = json.loads(raw)
        message = data["error"]["message"] if isinstance(data.get("error"), dict) else data.get("error", data)
    except (ValueError, AttributeError, KeyError, TypeError):
        message = raw.decode(errors="replace")
    return _short(str(message))


def _duration(seconds: float) -> str:
    """`482 s` as `8 min 2 s`; under a minute in seconds."""
    if seconds < 60:
        return f"{seconds:g} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def _short(text: str, n: int = 200) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= n else one[:n] + "…"
