"""A worker server that is LEMON's embedded backend: `lemon serve --engine embedded` (and `serving(...,
embedded=True)`) runs one `python -m lemon.llm.embedded_server` per model instead of llama.cpp's servers.

Why: a served pool should be able to take the embedded pool's draws, so that a logprob gate or a learned stop
rule decides on a served pool exactly as on the embedded levels (issue 54). llama_cpp.server runs the same engine
but gives log-probabilities only when started with `--logits_all true`, and then computes each token's by sorting
the whole vocabulary in Python (55 ms a token for SmolLM2's 49,152 entries, 280 ms for Qwen2.5's 151,936, on this
machine's 2 cores, against ~35 ms to generate a 1.5B token); llama-server reaches the logits by other code, so
its draws are its own. Here each request is one `EmbeddedBackend.complete` call: the same GGUF, context, threads
and `Llama` settings as an embedded level, the same sampler and seed (none: 0, as embedded), and each token's
log-probability read from the generation by the same `SampledLogprobs` (~0.3 ms a token); the served reply is the
embedded reply, token for token (tests/llm/test_served_logprobs.py).

The API is `lemon serve`'s (`gate.check_request`: one choice, text chat, roles system/user/assistant) plus what
this engine honours: `temperature`, `top_p`, `max_tokens`, `stop`, `seed`, `repeat_penalty`, `grammar`,
`response_format` (a JSON object with a schema), `logprobs` with `top_logprobs` 0 or 1 (the most likely token
under the raw logits). Any other sampling key is a 400, never silently ignored; so is `stream` (the gate asks
for the whole completion and streams it). Requests run one at a time per model, in arrival order, as on the
embedded level's own thread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from lemon.errors import LemonError
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.embedded import EmbeddedBackend, TokenLogprob
from lemon.llm.gate import MAX_REQUEST_BYTES, GateError, Route, check_request

log = logging.getLogger(__name__)

#: The request keys this engine reads or has checked (`check_request`); any other is refused, not ignored.
KNOWN_KEYS = frozenset({"model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop",
                        "seed", "repeat_penalty", "grammar", "response_format", "logprobs", "top_logprobs", "n",
                        "user", "stream", "stream_options"})
MAX_STOPS = 4  # OpenAI's bound


def _bad(message: str, param: str) -> GateError:
    return GateError(400, message, param=param)


def _number(body: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not low <= value <= high:
        raise _bad(f"'{key}' must be a number from {low:g} to {high:g}", key)
    return float(value)


def _count(body: Mapping[str, Any], key: str, low: int, high: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _bad(f"'{key}' must be an integer from {low} to {high}", key)
    return value


def _stops(value: object) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else value if value is not None else []
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
        raise _bad(f"'stop' must be a string or a list of at most {MAX_STOPS} non-empty strings", "stop")
    return tuple(stops)


def _schema(body: Mapping[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format")
    if fmt is None or fmt == {"type": "text"}:
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_object" and isinstance(fmt.get("schema", {}), dict):
        return dict(fmt.get("schema") or {"type": "object"})
    raise _bad("'response_format' must be {'type': 'text'} or {'type': 'json_object', 'schema': {...}} here",
               "response_format")


def chat_request(body: Mapping[str, Any], n_ctx: int) -> ChatRequest:
    """The embedded backend's request for a checked chat body; a key this engine would not honour is a 400."""
    unknown = sorted(k for k in body if k not in KNOWN_KEYS)
    if unknown:
        raise _bad(f"'{unknown[0]}' is not supported by the embedded engine (it samples as an embedded level "
                   "does: temperature, top_p, seed, repeat_penalty)", unknown[0])
    if body.get("stream"):
        raise _bad("the embedded engine does not stream; ask lemon serve's address, which streams its replies",
                   "stream")
    grammar = body.get("grammar")
    if grammar is not None and not isinstance(grammar, str):
        raise _bad("'grammar' must be a GBNF grammar (a string)", "grammar")
    limit = _count(body, "max_completion_tokens", 1, n_ctx) or _count(body, "max_tokens", 1, n_ctx) or n_ctx
    params = GenParams(temperature=_number(body, "temperature", 1.0, 0.0, 2.0), max_tokens=limit,
                       top_p=_number(body, "top_p", 1.0, 0.0, 1.0), seed=_count(body, "seed", 0, 2**32 - 1),
                       stop=_stops(body.get("stop")),
                       repeat_penalty=_number(body, "repeat_penalty", 1.0, 0.0, 10.0))
    messages = tuple(Message(m["role"], m["content"] if isinstance(m["content"], str)
                             else "".join(p["text"] for p in m["content"])) for m in body["messages"])
    return ChatRequest(messages, params, json_schema=_schema(body), grammar=grammar)


def _token(t: TokenLogprob, top: int) -> dict[str, Any]:
    text = t.token.decode("utf-8", errors="replace")
    best = [] if top == 0 or t.best is None else [
        {"token": t.best.decode("utf-8", errors="replace"), "logprob": t.best_logprob, "bytes": list(t.best)}]
    return {"token": text, "logprob": t.logprob, "bytes": list(t.token), "top_logprobs": best}


def completion_body(alias: str, request: ChatRequest, text: str, usage: tuple[int, int],
                    tokens: list[TokenLogprob] | None, top: int) -> dict[str, Any]:
    """An OpenAI chat completion; `finish_reason` is "length" when the reply used its whole token limit."""
    prompt, completion = usage
    finish = "length" if completion >= request.params.max_tokens else "stop"
    logprobs = None if tokens is None else {"content": [_token(t, top) for t in tokens]}
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": alias, "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                         "logprobs": logprobs, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


async def answer(backend: EmbeddedBackend, alias: str, body: Any) -> dict[str, Any]:
    """The completion for one request body, or the `GateError` the API would answer."""
    _, top = check_request(body, {alias: Route(alias, "", logprobs=True)})
    if top is not None and top > 1:
        raise _bad("the embedded engine gives the most likely token only: 'top_logprobs' must be 0 or 1",
                   "top_logprobs")
    request = chat_request(body, backend.n_ctx)
    try:
        if top is None:
            out, tokens = await backend.complete(request), None
        else:
            out, tokens = await backend.complete_with_tokens(request)
    except LemonError as exc:  # the prompt exceeds the context, a grammar llama.cpp refuses: the request's fault
        raise _bad(str(exc), "messages") from None
    return completion_body(alias, request, out.text, (out.prompt_tokens, out.completion_tokens), tokens, top or 0)


def embedded_app(backend: EmbeddedBackend, alias: str) -> web.Application:
    """The worker's aiohttp application: `GET /v1/models` and `POST /v1/chat/completions` for `alias`."""

    @web.middleware
    async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except GateError as exc:
            return exc.response()

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": alias, "object": "model", "created": 0, "owned_by": "lemon"}]})

    async def chat(request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
        except (ValueError, RecursionError):
            raise _bad("the request body is not JSON", "messages") from None
        return web.json_response(await answer(backend, alias, body))

    async def close(app: web.Application) -> None:
        await backend.aclose()

    app = web.Application(middlewares=[errors], client_max_size=MAX_REQUEST_BYTES)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.on_cleanup.append(close)
    return app


def main(argv: list[str] | None = None) -> None:
    """`python -m lemon.llm.embedded_server --model PATH --alias NAME --port P ...`: load the model, then serve
    (so a server that lists its model is ready), on 127.0.0.1 unless told otherwise, until terminated."""
    ap = argparse.ArgumentParser(prog="python -m lemon.llm.embedded_server", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a verified .gguf file (serve.py checks it)")
    ap.add_argument("--alias", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--n-ctx", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--gpu-layers", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    backend = EmbeddedBackend(args.model, n_ctx=args.n_ctx, n_threads=args.threads, n_gpu_layers=args.gpu_layers)
    try:
        asyncio.run(backend.prepare())  # before listening: answering /v1/models means ready
    except LemonError as exc:
        log.error("%s", exc)
        raise SystemExit(2) from None
    web.run_app(embedded_app(backend, args.alias), host=args.host, port=args.port, print=None, access_log=None,
                reuse_address=True)


if __name__ == "__main__":
    main()
