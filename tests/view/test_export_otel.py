"""OpenTelemetry export: attribute names on an in-memory exporter, and a real OTLP/HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from lemon.evaluation.store import ResultsStore
from lemon.inspection.export_otel import build_spans
from tests.llm.servers import free_port

from .conftest import Stored, assert_one_line_error, lemon


def test_spans_follow_the_genai_conventions(stored: Stored) -> None:
    with ResultsStore(stored.store) as db:
        run = db.run(stored.good)
        assert run is not None
        rows = {r.item_id: r for r in db.items(stored.good)}
        spans = build_spans(db, run)
    assert len({s.context.trace_id for s in spans}) == len(rows)  # one trace per item
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == len(rows) and all(s.attributes["lemon.run_id"] == stored.good for s in roots)
    agents = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(agents) == len(chats) == 3 * len(rows)
    by_id = {s.context.span_id: s for s in spans}
    for s in agents:
        assert s.name == f"invoke_agent {s.attributes['gen_ai.agent.name']}"
        assert by_id[s.parent.span_id].parent is None  # directly under the item's root
        assert {"lemon.role", "lemon.capacity", "lemon.depends_on", "lemon.cache_hit"} <= set(s.attributes)
    for c in chats:
        parent = by_id[c.parent.span_id]
        assert parent.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert c.attributes["gen_ai.request.model"] == "scripted-good" and c.name == "chat scripted-good"
        row = rows[by_id[parent.parent.span_id].attributes["lemon.item_id"]]
        tok = row.tokens[parent.attributes["gen_ai.agent.name"]]
        assert c.attributes["gen_ai.usage.input_tokens"] == tok["prompt"]
        assert c.attributes["gen_ai.usage.output_tokens"] == tok["completion"]
        assert "gen_ai.input.messages" not in c.attributes  # content only on request
        assert c.start_time <= c.end_time


class _Receiver(BaseHTTPRequestHandler):
    requests: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(body)
        self.server.received.append(msg)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args: object) -> None:
        return None


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Receiver)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.received  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def test_cli_sends_to_a_real_otlp_http_receiver(stored: Stored, _isolated_home: Path) -> None:
    with otlp_receiver() as (url, received):
        proc = lemon("export", "otel", stored.good[:6], "--endpoint", url, "--include-content",
                     "--store", str(stored.store), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    spans = [s for req in received for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == 7 * len(stored.items) and f"sent {len(spans)} spans" in proc.stdout
    assert len({s.trace_id for s in spans}) == len(stored.items)
    resource = {a.key: a.value.string_value for a in received[-1].resource_spans[0].resource.attributes}
    assert resource["service.name"] == "lemon"
    chat = next(s for s in spans if s.name.startswith("chat "))
    attrs = {a.key: a.value for a in chat.attributes}
    assert attrs["gen_ai.request.model"].string_value == "scripted-good"
    assert attrs["gen_ai.usage.input_tokens"].int_value > 0
    assert "not markup" in attrs["gen_ai.output.messages"].string_value
    agent = next(s for s in spans if s.name == "invoke_agent final")
    deps = {a.key: a.value for a in agent.attributes}["lemon.depends_on"]
    assert [v.string_value for v in deps.array_value.values] == ["checker"]


def test_unreachable_endpoint_is_one_line_and_sends_nothing(stored: Stored, _isolated_home: Path) -> None:
    port = free_port()  # nothing listens there
    proc = lemon("export", "otel", stored.good, "--endpoint", f"http://127.0.0.1:{port}/v1/traces",
                 "--store", str(stored.store), home=_isolated_home, timeout=60)
    assert_one_line_error(proc, "cannot reach the OTLP endpoint")
    with otlp_receiver() as (url, received):
        wrong_path = lemon("export", "otel", stored.good, "--endpoint", url + "/wrong", "--store",
                           str(stored.store), home=_isolated_home)
    assert_one_line_error(wrong_path, "answered HTTP 404")
    assert received == []
    assert_one_line_error(lemon("export", "otel", stored.good, "--endpoint", "ftp://x", "--store",
                                str(stored.store), home=_isolated_home), "expected an http(s) URL")
