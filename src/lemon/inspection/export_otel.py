"""Export stored runs as OpenTelemetry traces (OTLP/HTTP), in the GenAI semantic conventions.

One OTel trace per (item, seed): a root span for the item, an `invoke_agent {name}` span per agent that ran,
and under each model agent a `chat {model}` client span carrying `gen_ai.request.model` and the token usage.
LEMON's own fields go in `lemon.*` attributes (role, capacity, depends_on, cache hit, correctness). Timings
come from the stored trace (its event times, anchored at the row's wall-clock time), so spans line up as the
agents actually ran.

Nothing is sent anywhere unless the user names an endpoint. All spans are built in memory first and the
endpoint is probed before the first batch, so a typo or a collector that is down is one line and sends nothing.
Prompts and outputs are left out unless asked for (`include_content`): they may hold data a user's
observability stack should not see.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lemon.errors import LemonError
from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.inspection.itemview import agent_records, stop_event

_PROVIDERS = {"embedded": "llama.cpp", "openai": "openai"}
BATCH = 512


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _provider(model: str | None) -> str | None:
    return _PROVIDERS.get((model or "").split(":", 1)[0]) if model and ":" in model else None


def _root_attributes(run: RunInfo, row: ItemRow, trace: dict[str, Any]) -> dict[str, Any]:
    stop = stop_event(trace)
    return {"gen_ai.operation.name": "invoke_workflow", "lemon.run_id": run.run_id, "lemon.benchmark": run.benchmark,
            "lemon.split": run.split, "lemon.method": run.method, "lemon.pool": run.pool,
            "lemon.item_id": row.item_id, "lemon.seed": row.seed, "lemon.correct": bool(row.correct),
            "lemon.status": row.status, "lemon.stop_reason": str(stop.get("reason", "")),
            "lemon.prediction": row.prediction or "", "lemon.gold": (row.gold or "")[:500],
            "lemon.total_tokens": row.total_tokens, "lemon.output_agent": str((trace.get("topology") or {})
                                                                               .get("output", ""))}


def item_spans(tracer: trace_api.Tracer, run: RunInfo, row: ItemRow, trace: dict[str, Any], *,
               include_content: bool = False) -> None:
    """Emit the spans of one item (its own OTel trace: the root span has no parent)."""
    start = row.created - row.latency_s
    end = row.created
    root = tracer.start_span(f"lemon.item {row.item_id}", context=Context(), start_time=_ns(start),
                             attributes=_root_attributes(run, row, trace))
    root_ctx = trace_api.set_span_in_context(root)
    for a in agent_records(trace):
        if not a.ran:
            continue
        s0, s1 = start + (a.start_s or 0.0), start + (a.end_s or a.start_s or 0.0)
        attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": a.name,
                                 "lemon.role": a.role, "lemon.capacity": a.capacity,
                                 "lemon.depends_on": list(a.depends_on),
                                 "lemon.cache_hit": bool(a.cached), "lemon.duty": a.duty}
        if a.model:
            attrs["gen_ai.request.model"] = a.model
        agent_span = tracer.start_span(f"invoke_agent {a.name}", context=root_ctx, start_time=_ns(s0), attributes=attrs)
        if a.queued_s is not None:
            agent_span.set_attribute("lemon.queued_s", a.queued_s)
        if a.model and a.model != "vote":  # the model call itself: from leaving the level's queue to the answer
            _chat_span(tracer, agent_span, a, start + a.sent_s if a.sent_s is not None else s0, s1, include_content)
        agent_span.end(end_time=_ns(s1))
    root.end(end_time=_ns(max(end, start)))


def _chat_span(tracer: trace_api.Tracer, parent: trace_api.Span, a: Any, s0: float, s1: float,
               include_content: bool) -> None:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": a.model,
                             "gen_ai.response.model": a.model, "gen_ai.usage.input_tokens": int(a.prompt_tokens or 0),
                             "gen_ai.usage.output_tokens": int(a.completion_tokens or 0),
                             "lemon.cache_hit": bool(a.cached), "gen_ai.agent.name": a.name}
    if (provider := _provider(a.model)) is not None:
        attrs["gen_ai.provider.name"] = provider
    if include_content:
        attrs["gen_ai.input.messages"] = json.dumps(
            [{"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]} for m in a.prompt or ()])
        attrs["gen_ai.output.messages"] = json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": a.output or ""}]}])
    span = tracer.start_span(f"chat {a.model}", context=trace_api.set_span_in_context(parent),
                             kind=trace_api.SpanKind.CLIENT, start_time=_ns(s0), attributes=attrs)
    span.end(end_time=_ns(s1))


def build_spans(db: ResultsStore, run: RunInfo, *, item_ids: Sequence[str] | None = None,
                include_content: bool = False, exporter: SpanExporter | None = None) -> list[ReadableSpan]:
    """Every span of the run's stored items (those with a trace), built in memory (and sent to `exporter`)."""
    from lemon import __version__

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "lemon", "service.version": __version__}))
    provider.add_span_processor(SimpleSpanProcessor(exporter or memory))
    tracer = provider.get_tracer("lemon", __version__)
    rows = db.items(run.run_id, item_ids=item_ids)
    if item_ids is not None and not rows:
        raise LemonError(f"run {run.run_id} has none of the items {', '.join(item_ids)}; list them with "
                         f"`lemon trace {run.run_id}`")
    traces = db.traces(run.run_id, [(r.item_id, r.seed) for r in rows])
    for r in rows:
        text = traces.get((r.item_id, r.seed))
        if text is not None:
            item_spans(tracer, run, r, json.loads(text), include_content=include_content)
    provider.shutdown()
    return list(memory.get_finished_spans())


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL: a bare collector address gets the standard `/v1/traces` path."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise LemonError(f"--endpoint {endpoint!r}: expected an http(s) URL such as http://127.0.0.1:4318/v1/traces")
    return endpoint.rstrip("/") + "/v1/traces" if parts.path in ("", "/") else endpoint


def otlp_headers(pairs: Sequence[str] = ()) -> dict[str, str]:
    """Request headers: the standard `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS` variables, then each `--header
    NAME=VALUE` (Langfuse wants `Authorization=Basic <base64 of public:secret key>`). A variable keeps a
    secret out of the process list and the shell history."""
    import os

    from opentelemetry.util.re import parse_env_headers

    out: dict[str, str] = {}
    for var in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        out.update(parse_env_headers(os.environ.get(var, ""), liberal=True))
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise LemonError(f"--header {pair.split('=')[0]!r}...: write NAME=VALUE, e.g. --header "
                             "'Authorization=Basic <base64 of public:secret key>'")
        out[name.strip().lower()] = value.strip()
    return out


def probe(url: str, timeout: float, headers: dict[str, str] | None = None) -> None:
    """POST an empty OTLP request: an endpoint that does not answer 2xx is one line, before anything is sent."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = urllib.request.Request(url, data=ExportTraceServiceRequest().SerializeToString(), method="POST",
                                 headers={**(headers or {}), "Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # the user's own endpoint
            resp.read()
    except urllib.error.HTTPError as exc:
        fix = ("check the credentials (--header or OTEL_EXPORTER_OTLP_HEADERS)" if exc.code in (401, 403) else
               "check the URL (a collector's OTLP/HTTP traces path is /v1/traces)")
        raise LemonError(f"OTLP endpoint {url} answered HTTP {exc.code}; {fix}; nothing was sent") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise LemonError(f"cannot reach the OTLP endpoint {url} ({reason}); start the collector or fix --endpoint; "
                         "nothing was sent") from None


def export_otel(db: ResultsStore, run: RunInfo, endpoint: str, *, item_ids: Sequence[str] | None = None,
                include_content: bool = False, timeout: float = 10.0, headers: dict[str, str] | None = None) -> int:
    """Send the run's items to an OTLP/HTTP endpoint; returns the number of spans sent."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    url = traces_url(endpoint)
    spans = build_spans(db, run, item_ids=item_ids, include_content=include_content)
    if not spans:
        raise LemonError(f"run {run.run_id} has no stored traces to export")
    probe(url, min(timeout, 5.0), headers)
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout, headers=headers or None)
    try:
        for i in range(0, len(spans), BATCH):
            if exporter.export(spans[i:i + BATCH]) is not SpanExportResult.SUCCESS:
                raise LemonError(f"the OTLP endpoint {url} refused a batch after {i} of {len(spans)} spans")
    finally:
        exporter.shutdown()
    return len(spans)


def otlp_json_lines(spans: Sequence[ReadableSpan]) -> str:
    """The spans in the OTLP/JSON encoding, one ExportTraceServiceRequest of at most BATCH spans per line (the
    layout of the OpenTelemetry collector's file exporter; ids in hex, as OTLP/JSON requires), so a file can be
    replayed to any collector or read without one."""
    import base64

    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    def hex_ids(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") and v else hex_ids(v))
                    for k, v in node.items()}
        return [hex_ids(v) for v in node] if isinstance(node, list) else node

    lines = [json.dumps(hex_ids(MessageToDict(encode_spans(spans[i:i + BATCH]))), separators=(",", ":"))
             for i in range(0, len(spans), BATCH)]
    return "".join(line + "\n" for line in lines)
