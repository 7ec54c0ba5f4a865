"""`lemon serve`'s front door: the OpenAI chat API, checked, in front of the worker model servers.

Why: llama.cpp's servers are OpenAI-compatible only where LEMON's own client looks. A client that relies on the
API's contract notices the rest (issue 52): a model name the server does not serve is answered by whatever it
loaded; a bad role or `n: 2` is HTTP 500, which the official SDK retries, or a silent single choice; neither
server has an API key of its own here, and llama-server's `top_logprobs: 0` returns no log-probabilities at all.
This gate answers what a client gets wrong the way the API does (404 for an unknown model, 400 for a bad
request, 401 without the key, OpenAI's error body) and forwards the rest, streams included, to the server of
the named model; the servers themselves listen on 127.0.0.1 only.

What it does not do, by design (docs/serve.md): only `POST /v1/chat/completions` and `GET /v1/models`; one
choice per request (`n` > 1 is a 400); messages of role system, user or assistant with text content (no tools,
functions or images); no TLS (put a reverse proxy in front for that). Token log-probabilities need llama-server
(experiments/build_llama_server.sh): llama_cpp.server is run without per-token logits (`--logits_all false`,
as the embedded workers), so `logprobs` is a 400 there; and since it cannot end a stream with usage, a stream
that asks for usage is asked of it whole and sent as one chunk, then usage.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from lemon.errors import ConfigError

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")
MAX_REQUEST_BYTES = 8 * 1024 * 1024  # a chat request of any context this project's models take fits easily
MAX_TOP_LOGPROBS = 20                # OpenAI's bound
UNSUPPORTED = ("tools", "tool_choice", "functions", "function_call", "audio", "modalities")


@dataclass(frozen=True)
class Route:
    """A served model: the name clients ask for, its server's base URL, and whether it gives logprobs."""

    alias: str
    upstream: str
    logprobs: bool
    stream_usage: bool = True  # the server ends a stream with usage when asked (llama_cpp.server does not)
    streams: bool = True  # the server streams at all (the embedded engine does not: its streams are asked whole)


class GateError(Exception):
    """A request answered by the gate itself, as the OpenAI API answers it (status, and the error body)."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> web.Response:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}
        return web.json_response(body, status=self.status)


def _bad(message: str, param: str | None = None) -> GateError:
    return GateError(400, message, param=param)


def check_messages(messages: object) -> None:
    """A non-empty list of {role, content}: role system, user or assistant; content text or text parts."""
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array of messages", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _bad(f"messages[{i}] must be an object with 'role' and 'content'", f"messages[{i}]")
        if m.get("role") not in ROLES:
            raise _bad(f"messages[{i}].role {str(m.get('role'))[:40]!r} is not supported here; use one of "
                       f"{', '.join(ROLES)}", f"messages[{i}].role")
        content = m.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                   for p in parts):
            raise _bad(f"messages[{i}].content must be text (a string, or parts of type 'text')",
                       f"messages[{i}].content")


def check_logprobs(body: Mapping[str, Any], route: Route) -> int | None:
    """The number of top log-probabilities asked for per token (0..20), or None when `logprobs` is off."""
    top = body.get("top_logprobs")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise _bad(f"'top_logprobs' must be an integer from 0 to {MAX_TOP_LOGPROBS}", "top_logprobs")
    if not body.get("logprobs"):
        if top is not None:
            raise _bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        return None
    if not route.logprobs:
        raise _bad(f"model {route.alias!r} is served by llama_cpp.server, which is run without per-token logits; "
                   "log-probabilities need llama-server (bash experiments/build_llama_server.sh, then restart "
                   "lemon serve) or the embedded engine (lemon serve --engine embedded)", "logprobs")
    return top or 0


def check_request(body: object, routes: Mapping[str, Route]) -> tuple[Route, int | None]:
    """The route for a chat request and its `top_logprobs`, or the `GateError` the API would answer."""
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = body.get("model")
    route = routes.get(model) if isinstance(model, str) else None
    if route is None:
        raise GateError(404, f"The model {str(model)[:80]!r} does not exist here; served: {', '.join(routes)}",
                        param="model", code="model_not_found")
    check_messages(body.get("messages"))
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise _bad("only one choice per request is supported here ('n' must be 1); send n requests", "n")
    for key in UNSUPPORTED:
        if body.get(key) is not None:
            raise _bad(f"'{key}' is not supported by lemon serve (text chat only)", key)
    if body.get("stream_options") is not None and not body.get("stream"):
        raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
    return route, check_logprobs(body, route)


def upstream_body(body: dict[str, Any], top: int | None) -> dict[str, Any]:
    """What the server gets: llama-server gives no log-probabilities at all for `top_logprobs: 0` (it keeps
    only the n most likely), so it is asked for 1 and the reply trimmed back (`trim_logprobs`)."""
    out = dict(body)
    if top is not None:
        out["top_logprobs"] = max(top, 1)
    return out


def trim_logprobs(reply: Any, top: int) -> Any:
    """`reply` (a completion or a stream chunk) with at most `top` alternatives per token, as asked."""
    if not isinstance(reply, dict):
        return reply
    for choice in reply.get("choices") or []:
        lp = choice.get("logprobs") if isinstance(choice, dict) else None
        for token in (lp.get("content") or []) if isinstance(lp, dict) else []:
            if isinstance(token, dict) and isinstance(token.get("top_logprobs"), list):
                token["top_logprobs"] = token["top_logprobs"][:top]
    return reply


def _trim_event(line: bytes, top: int) -> bytes:
    """One server-sent-events line, its JSON trimmed when it is a `data:` chunk."""
    if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
        return line
    try:
        chunk = json.loads(line[5:])
    except ValueError:
        return line
    return b"data: " + json.dumps(trim_logprobs(chunk, top)).encode() + b"\n"


def _wants_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def authorized(request: web.Request, api_key: str | None) -> bool:
    """No key set, or `Authorization: Bearer KEY` with the key (compared in constant time)."""
    if api_key is None:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), api_key.encode())


@dataclass
class Gate:
    """The gate's state: the routes by model name, the key (None: open), the session to the servers."""

    routes: dict[str, Route]
    api_key: str | None
    session: aiohttp.ClientSession | None = None

    @web.middleware
    async def guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """The key first, for every path (as the API does); an unknown path is OpenAI's 404 body."""
        if not authorized(request, self.api_key):
            return GateError(401, "Incorrect or missing API key: send 'Authorization: Bearer KEY' with the key "
                             "lemon serve was started with", code="invalid_api_key").response()
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return GateError(404, f"no such endpoint here: {request.method} {request.path}; lemon serve "
                             "answers POST /v1/chat/completions and GET /v1/models", code="not_found").response()
        except web.HTTPMethodNotAllowed:
            return GateError(405, f"{request.method} is not allowed on {request.path}").response()
        except GateError as exc:
            return exc.response()

    async def models(self, request: web.Request) -> web.Response:
        data = [{"id": alias, "object": "model", "created": 0, "owned_by": "lemon"} for alias in self.routes]
        return web.json_response({"object": "list", "data": data})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """Check the request, forward it to its model's server, pass the answer back as it comes."""
        try:
            body = json.loads(await request.read())
        except web.HTTPRequestEntityTooLarge:
            raise GateError(413, f"the request is larger than {MAX_REQUEST_BYTES} bytes") from None
        except (ValueError, RecursionError):
            raise _bad("the request body is not JSON") from None
        route, top = check_request(body, self.routes)
        if self.session is None:
            raise GateError(503, "lemon serve is starting; try again", kind="server_error")
        asked = bool(body.get("stream"))
        whole = asked and (not route.streams or (not route.stream_usage and _wants_usage(body)))
        try:
            if whole:
                return await _stream_whole(self.session, request, route, body)
            async with self.session.post(route.upstream + "/chat/completions", json=upstream_body(body, top)) as up:
                return await self._relay(request, up, top)
        except aiohttp.ClientConnectionError as exc:
            raise GateError(502, f"the server of {route.alias!r} cannot be reached ({type(exc).__name__}); "
                            "see lemon serve's log", kind="server_error") from None

    async def _relay(self, request: web.Request, up: aiohttp.ClientResponse, top: int | None) -> web.StreamResponse:
        """The server's status and body, chunk by chunk (a stream event by event), trimmed to `top`."""
        streaming = up.headers.get("Content-Type", "").startswith("text/event-stream")
        if top is not None and not streaming:
            return web.json_response(trim_logprobs(await _json_of(up), top), status=up.status)
        out = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers.get(
            "Content-Type", "application/json")})
        await out.prepare(request)
        if top is not None:
            async for line in up.content:
                await out.write(_trim_event(line, top))
        else:
            async for chunk in up.content.iter_any():
                await out.write(chunk)
        await out.write_eof()
        return out

    async def start(self, app: web.Application) -> None:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))

    async def stop(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()


async def _json_of(up: aiohttp.ClientResponse) -> Any:
    """The server's JSON body, or an OpenAI error body saying it sent none."""
    try:
        return await up.json(content_type=None)
    except ValueError:
        return {"error": {"message": f"the model server answered HTTP {up.status} without JSON",
                          "type": "server_error", "param": None, "code": None}}


async def _stream_whole(session: aiohttp.ClientSession, request: web.Request, route: Route,
                        body: dict[str, Any]) -> web.StreamResponse:
    """A stream from a server that cannot send it (with usage, or at all): the completion asked for whole (its
    usage is the server's own count), sent as one content chunk, a usage chunk when asked, and [DONE]."""
    plain = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    async with session.post(route.upstream + "/chat/completions", json=plain) as up:
        reply = await _json_of(up)
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if up.status != 200 or not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return web.json_response(reply, status=up.status if up.status != 200 else 502)
    head = {k: reply.get(k) for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = choices[0]
    delta = {"role": "assistant", "content": (choice.get("message") or {}).get("content")}
    events = [{**head, "choices": [{"index": 0, "delta": delta, "logprobs": choice.get("logprobs"),
                                    "finish_reason": choice.get("finish_reason")}]},
              {**head, "choices": [], "usage": reply.get("usage")}][:2 if _wants_usage(body) else 1]
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await out.prepare(request)
    for event in events:
        await out.write(b"data: " + json.dumps(event).encode() + b"\n\n")
    await out.write(b"data: [DONE]\n\n")
    await out.write_eof()
    return out


def gate_app(routes: dict[str, Route], api_key: str | None) -> web.Application:
    """The aiohttp application of the gate (a test runs it on a free port; `run_gate` serves it)."""
    gate = Gate(routes, api_key)
    app = web.Application(middlewares=[gate.guard], client_max_size=MAX_REQUEST_BYTES)
    app.router.add_get("/v1/models", gate.models)
    app.router.add_post("/v1/chat/completions", gate.chat)
    app.on_startup.append(gate.start)
    app.on_cleanup.append(gate.stop)
    return app


async def run_gate(routes: dict[str, Route], host: str, ports: list[int], api_key: str | None,
                   on_ready: Callable[[], None] = lambda: None) -> None:
    """Serve the gate on `host` at each of `ports` (every one answers for every model: a served pool keeps
    a port per model, as `--serve-workers` gives) until cancelled (Ctrl-C ends `asyncio.run`, which cancels
    this); `on_ready` once it listens. An address it cannot listen on is one line."""
    runner = web.AppRunner(gate_app(routes, api_key), access_log=None)
    await runner.setup()
    try:
        for port in ports:
            try:
                await web.TCPSite(runner, host, port).start()
            except OSError as exc:
                raise ConfigError(f"lemon serve cannot listen on {host}:{port}: {exc.strerror or exc}; pass "
                                  "another --port, or a --host of this machine") from None
        on_ready()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
