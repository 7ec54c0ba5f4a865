"""Export stored runs as OpenTelemetry traces (OTLP/HTTP), in the GenAI and OpenInference semantic conventions.

One OTel trace per (item, seed): a root span for the item, an `invoke_agent {name}` span per agent that ran,
and under each model agent a `chat {model}` client span carrying `gen_ai.request.model` and the token usage.
LEMON's own fields go in `lemon.*` attributes (role, capacity, depends_on, cache hit, correctness; correctness
only where there is a gold answer: a `lemon run` is unscored, so `lemon.correct` is absent, not false). Timings
come from the stored trace (its event times, anchored at the row's wall-clock time), so spans line up as the
agents actually ran.

The spec's DAG is in the trace twice, since a span has one parent and an agent may wait on several: each agent's
span links to the spans of the agents it depends on (`vote` links to every voter), and carries OpenInference's
`graph.node.id` (its name) and `graph.node.parent_id` (the dependency that finished last, the one it waited for;
the item's root for an agent without one), which Phoenix and Arize read as the agent graph. Each span says its
OpenInference kind (the item CHAIN: the runtime running the spec; an agent AGENT; a model call LLM) and its
status (an item that ended in error, timeout or over budget is ERROR). Phoenix and Langfuse read both
conventions: with content, the output messages carry their `finish_reason` (GenAI requires it; without it
Phoenix drops the messages and shows the response model as the output) and `output.value` holds the reply.

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

from openinference.semconv.trace import MessageAttributes as Msg
from openinference.semconv.trace import OpenInferenceMimeTypeValues as Mime
from openinference.semconv.trace import OpenInferenceSpanKindValues as Kind
from openinference.semconv.trace import SpanAttributes as OI
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, Status, StatusCode

from lemon.errors import LemonError
from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.inspection.itemview import AgentRecord, agent_records, stop_event
from lemon.runtime.trace import Trace

_PROVIDERS = {"embedded": "llama.cpp", "openai": "openai"}
BATCH = 512
ROOT_NODE = "lemon.item"  # the item's graph node: a dot, so never an agent's name ([a-z][a-z0-9_]*)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _provider(model: str | None) -> str | None:
    return _PROVIDERS.get((model or "").split(":", 1)[0]) if model and ":" in model else None


def _root_attributes(run: RunInfo, row: ItemRow, trace: Trace) -> dict[str, Any]:
    stop = stop_event(trace)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_workflow", OI.OPENINFERENCE_SPAN_KIND: Kind.CHAIN.value,
        OI.GRAPH_NODE_ID: ROOT_NODE, OI.GRAPH_NODE_NAME: f"item {row.item_id}",
        "lemon.run_id": run.run_id, "lemon.benchmark": run.benchmark, "lemon.split": run.split,
        "lemon.method": run.method, "lemon.pool": run.pool, "lemon.item_id": row.item_id, "lemon.seed": row.seed,
        "lemon.status": row.status, "lemon.stop_reason": str(stop.get("reason", "")),
        "lemon.prediction": row.prediction or "", "lemon.total_tokens": row.total_tokens,
        "lemon.output_agent": str(trace.topology.get("output", ""))}
    if row.gold is not None:  # no gold answer (a `lemon run`): unscored, so neither right nor wrong
        attrs["lemon.correct"] = bool(row.correct)
        attrs["lemon.gold"] = row.gold[:500]
    return attrs


def _text_io(prefix: str, text: str) -> dict[str, Any]:
    """OpenInference's `input.*` or `output.*` pair for plain text (what Phoenix shows in its panes)."""
    value, mime = (OI.INPUT_VALUE, OI.INPUT_MIME_TYPE) if prefix == "input" else (OI.OUTPUT_VALUE, OI.OUTPUT_MIME_TYPE)
    return {value: text, mime: Mime.TEXT.value}


def _root_content(trace: Trace) -> dict[str, Any]:
    output = str(trace.topology.get("output", ""))
    return {**_text_io("input", trace.task or ""), **_text_io("output", trace.contents.get(output) or "")}


def _dependency_order(ran: dict[str, AgentRecord]) -> list[AgentRecord]:
    """The agents that ran, each after those it depends on (spec order otherwise), so a span can link to its
    dependencies' spans when it starts."""
    order: list[AgentRecord] = []
    placed: set[str] = set()
    pending = list(ran.values())
    while pending:
        ready = [a for a in pending if all(d in placed or d not in ran for d in a.depends_on)] or pending
        order += ready
        placed |= {a.name for a in ready}
        pending = [a for a in pending if a.name not in placed]
    return order


def item_spans(tracer: trace_api.Tracer, run: RunInfo, row: ItemRow, trace: Trace, *,
               include_content: bool = False) -> None:
    """Emit the spans of one item (its own OTel trace: the root span has no parent)."""
    start = row.created - row.latency_s
    attrs = _root_attributes(run, row, trace) | (_root_content(trace) if include_content else {})
    root = tracer.start_span(f"lemon.item {row.item_id}", context=Context(), start_time=_ns(start), attributes=attrs)
    root_ctx = trace_api.set_span_in_context(root)
    ran = {a.name: a for a in agent_records(trace) if a.ran}
    done: dict[str, trace_api.Span] = {}
    for a in _dependency_order(ran):
        done[a.name] = _agent_span(tracer, root_ctx, a, start, done, ran, include_content=include_content,
                                   max_tokens=run.max_tokens)
    if row.status == "ok":
        root.set_status(Status(StatusCode.OK))
    else:
        root.set_status(Status(StatusCode.ERROR, f"{row.status}: {row.stop_reason}" if row.stop_reason else row.status))
    root.end(end_time=_ns(max(row.created, start)))


def _agent_span(tracer: trace_api.Tracer, root_ctx: Context, a: AgentRecord, start: float,
                done: dict[str, trace_api.Span], ran: dict[str, AgentRecord], *, include_content: bool,
                max_tokens: int | None) -> trace_api.Span:
    """One agent's span, linked to the spans of the agents it depends on; its model call inside."""
    s0, s1 = start + (a.start_s or 0.0), start + (a.end_s or a.start_s or 0.0)
    deps = [d for d in a.depends_on if d in done]
    waited_for = max(deps, key=lambda d: ran[d].end_s or 0.0, default=ROOT_NODE)  # ties: the first listed
    attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": a.name,
                             OI.OPENINFERENCE_SPAN_KIND: Kind.AGENT.value, OI.AGENT_NAME: a.name,
                             OI.GRAPH_NODE_ID: a.name, OI.GRAPH_NODE_NAME: a.name,
                             OI.GRAPH_NODE_PARENT_ID: waited_for,
                             "lemon.role": a.role, "lemon.capacity": a.capacity, "lemon.depends_on": list(a.depends_on),
                             "lemon.cache_hit": bool(a.cached), "lemon.duty": a.duty}
    if a.model:
        attrs["gen_ai.request.model"] = a.model
    if a.queued_s is not None:
        attrs["lemon.queued_s"] = a.queued_s
    if include_content:
        attrs |= _text_io("input", _last_user(a)) | _text_io("output", a.output or "")
    links = [Link(done[d].get_span_context(), {"lemon.depends_on": d}) for d in deps]
    span = tracer.start_span(f"invoke_agent {a.name}", context=root_ctx, start_time=_ns(s0), attributes=attrs,
                             links=links)
    if a.model and a.model != "vote":  # the model call itself: from leaving the level's queue to the answer
        _chat_span(tracer, span, a, start + a.sent_s if a.sent_s is not None else s0, s1,
                   include_content=include_content, max_tokens=max_tokens)
    span.set_status(Status(StatusCode.OK))
    span.end(end_time=_ns(s1))
    return span


def _last_user(a: AgentRecord) -> str:
    """The agent's task as it was sent: its last user message (the duty, the task and its parents' outputs)."""
    users = [m["content"] for m in a.prompt or () if m.get("role") == "user"]
    return users[-1] if users else ""


def finish_reason(a: AgentRecord, max_tokens: int | None) -> str:
    """Why the model stopped, which the trace does not store: `length` when the reply used the whole
    `max_tokens` budget (it was cut), `stop` otherwise."""
    cut = isinstance(max_tokens, int) and max_tokens > 0 and (a.completion_tokens or 0) >= max_tokens
    return "length" if cut else "stop"


def _chat_content(a: AgentRecord, reason: str) -> dict[str, Any]:
    """The call's messages in both conventions: GenAI's JSON (with the required `finish_reason`) and
    OpenInference's flattened `llm.*_messages` with `input.value` / `output.value`."""
    prompt = [(m["role"], m["content"]) for m in a.prompt or ()]
    reply = a.output or ""
    out: dict[str, Any] = {
        "gen_ai.input.messages": json.dumps([{"role": r, "parts": [{"type": "text", "content": c}]}
                                             for r, c in prompt]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": reply}],
                                               "finish_reason": reason}]),
        OI.INPUT_VALUE: json.dumps([{"role": r, "content": c} for r, c in prompt]),
        OI.INPUT_MIME_TYPE: Mime.JSON.value, **_text_io("output", reply)}
    for i, (role, content) in enumerate(prompt):
        out[f"{OI.LLM_INPUT_MESSAGES}.{i}.{Msg.MESSAGE_ROLE}"] = role
        out[f"{OI.LLM_INPUT_MESSAGES}.{i}.{Msg.MESSAGE_CONTENT}"] = content
    out[f"{OI.LLM_OUTPUT_MESSAGES}.0.{Msg.MESSAGE_ROLE}"] = "assistant"
    out[f"{OI.LLM_OUTPUT_MESSAGES}.0.{Msg.MESSAGE_CONTENT}"] = reply
    return out


def _chat_span(tracer: trace_api.Tracer, parent: trace_api.Span, a: AgentRecord, s0: float, s1: float, *,
               include_content: bool, max_tokens: int | None) -> None:
    prompt, completion = int(a.prompt_tokens or 0), int(a.completion_tokens or 0)
    reason = finish_reason(a, max_tokens)
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": a.model,
                             "gen_ai.response.model": a.model, "gen_ai.usage.input_tokens": prompt,
                             "gen_ai.usage.output_tokens": completion, "gen_ai.response.finish_reasons": [reason],
                             OI.OPENINFERENCE_SPAN_KIND: Kind.LLM.value, OI.LLM_MODEL_NAME: str(a.model),
                             OI.LLM_TOKEN_COUNT_PROMPT: prompt, OI.LLM_TOKEN_COUNT_COMPLETION: completion,
                             OI.LLM_TOKEN_COUNT_TOTAL: prompt + completion, OI.LLM_FINISH_REASON: reason,
                             "lemon.cache_hit": bool(a.cached), "gen_ai.agent.name": a.name}
    if (provider := _provider(a.model)) is not None:
        attrs["gen_ai.provider.name"] = provider
    if include_content:
        attrs |= _chat_content(a, reason)
    span = tracer.start_span(f"chat {a.model}", context=trace_api.set_span_in_context(parent),
                             kind=trace_api.SpanKind.CLIENT, start_time=_ns(s0), attributes=attrs)
    span.set_status(Status(StatusCode.OK))
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
        trace = traces.get((r.item_id, r.seed))
        if trace is not None:
            item_spans(tracer, run, r, trace, include_content=include_content)
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
               f"an OTLP/HTTP traces URL ends in /v1/traces: try {url.rstrip('/')}/v1/traces"
               if exc.code == 404 and not urlsplit(url).path.rstrip("/").endswith("/v1/traces") else
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
