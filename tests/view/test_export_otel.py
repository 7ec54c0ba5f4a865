"""OpenTelemetry export: attribute names on an in-memory exporter, and a real OTLP/HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from openinference.semconv.trace import OpenInferenceSpanKindValues as Kind
from openinference.semconv.trace import SpanAttributes as OI
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import StatusCode

from lemon.evaluation.store import ItemRow, ResultsStore
from lemon.inspection.export_otel import ROOT_NODE, build_spans, finish_reason
from lemon.inspection.itemview import agent_records
from lemon.inspection.tracefile import read_trace, trace_store
from lemon.runtime.trace import Trace
from tests.llm.servers import QuietHandler, free_port, root_url, serving

from .conftest import Stored, assert_one_line_error, lemon
from .test_honest_items import _run, _team, _voters

LANGFUSE_TRACES = "/api/public/otel/v1/traces"  # where Langfuse's OTLP/HTTP endpoint takes traces


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


class _Receiver(QuietHandler):
    protocol_version = "HTTP/1.0"  # its replies have no Content-Length: closing the connection ends them
    requests: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != self.server.path:  # type: ignore[attr-defined]
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


@contextmanager
def otlp_receiver(path: str = "/v1/traces") -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    """A real OTLP/HTTP receiver on 127.0.0.1 that takes traces at `path` only (404 elsewhere)."""
    with serving(_Receiver) as server:
        server.received = []  # type: ignore[attr-defined]
        server.path = path  # type: ignore[attr-defined]
        yield root_url(server), server.received  # type: ignore[attr-defined]


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
    checker = next(s for s in spans if s.name == "invoke_agent checker" and s.trace_id == agent.trace_id)
    assert [(link.trace_id, link.span_id) for link in agent.links] == [(checker.trace_id, checker.span_id)]


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


def _vote_spans(tmp_path: Path) -> tuple[Trace, list]:  # type: ignore[type-arg]
    """A `lemon run` of three voters and a vote (no gold answer), exported with content."""
    path = _run(_voters(["The answer is 5.", "The answer is 6.", "So 5."]), _team(3), tmp_path)
    db, run = trace_store(path)
    with db:
        return read_trace(path), list(build_spans(db, run, include_content=True))


def test_the_agent_graph_is_in_the_trace(tmp_path: Path) -> None:
    """vote <- v0, v1, v2: the vote's span links to the three voters' spans, and OpenInference's graph node ids
    draw the tree Phoenix shows (a node has one parent: the dependency the vote waited for last)."""
    trace, spans = _vote_spans(tmp_path)
    (root,) = [s for s in spans if s.parent is None]
    agents = {s.attributes["gen_ai.agent.name"]: s for s in spans
              if s.attributes[OI.OPENINFERENCE_SPAN_KIND] == Kind.AGENT.value}
    assert set(agents) == {"v0", "v1", "v2", "vote"}
    voters = {agents[v].context.span_id for v in ("v0", "v1", "v2")}
    assert {link.context.span_id for link in agents["vote"].links} == voters
    assert {link.context.trace_id for link in agents["vote"].links} == {root.context.trace_id}
    assert all(not agents[v].links for v in ("v0", "v1", "v2"))
    ends = {a.name: a.end_s or 0.0 for a in agent_records(trace)}
    waited_for = max(("v0", "v1", "v2"), key=lambda v: ends[v])
    edges = {(s.attributes[OI.GRAPH_NODE_PARENT_ID], s.attributes[OI.GRAPH_NODE_ID]) for s in agents.values()}
    assert edges == {(ROOT_NODE, "v0"), (ROOT_NODE, "v1"), (ROOT_NODE, "v2"), (waited_for, "vote")}
    assert root.attributes[OI.GRAPH_NODE_ID] == ROOT_NODE and OI.GRAPH_NODE_PARENT_ID not in root.attributes


def test_each_span_has_its_kind_status_and_reply(tmp_path: Path) -> None:
    trace, spans = _vote_spans(tmp_path)
    kinds = {(s.name.split(" ")[0], s.attributes[OI.OPENINFERENCE_SPAN_KIND]) for s in spans}
    assert kinds == {("lemon.item", Kind.CHAIN.value), ("invoke_agent", Kind.AGENT.value), ("chat", Kind.LLM.value)}
    assert all(s.status.status_code is StatusCode.OK for s in spans)
    chats = [s for s in spans if s.attributes[OI.OPENINFERENCE_SPAN_KIND] == Kind.LLM.value]
    assert len(chats) == 3
    for c in chats:
        reply = trace.contents[c.attributes["gen_ai.agent.name"]]
        (message,) = json.loads(c.attributes["gen_ai.output.messages"])
        assert message["finish_reason"] == "stop" and message["parts"] == [{"type": "text", "content": reply}]
        assert c.attributes["gen_ai.response.finish_reasons"] == ("stop",)
        assert c.attributes[OI.OUTPUT_VALUE] == reply
    vote = next(s for s in spans if s.name == "invoke_agent vote")
    assert vote.attributes[OI.OUTPUT_VALUE] == trace.contents["vote"]
    (root,) = [s for s in spans if s.parent is None]
    assert root.attributes[OI.INPUT_VALUE] == trace.task and root.attributes[OI.OUTPUT_VALUE] == \
        trace.contents["vote"]
    assert "lemon.correct" not in root.attributes and "lemon.gold" not in root.attributes  # no gold: unscored


def test_an_item_that_failed_is_an_error_span(tmp_path: Path) -> None:
    path = _run(_voters(["The answer is 5."] * 3), _team(3), tmp_path)
    with ResultsStore(tmp_path / "r.sqlite") as db:
        run = db.ensure_run("r1", benchmark="gsm8k", split="test", method="cot", pool="tiny", level="large",
                            seeds=1, n_items=1, config={"max_tokens": 64})
        db.put("r1", ItemRow(item_id="late", seed=0, prediction=None, gold="5", correct=False, tokens={},
                             total_tokens=10, latency_s=1.0, trace_id=None, status="timeout",
                             stop_reason="wall clock limit 1s", trace_json=path.read_text()))
        spans = build_spans(db, run)
    (root,) = [s for s in spans if s.parent is None]
    assert root.status.status_code is StatusCode.ERROR and root.status.description == "timeout: wall clock limit 1s"
    assert root.attributes["lemon.correct"] is False and root.attributes["lemon.gold"] == "5"  # scored: wrong


def test_a_reply_that_used_every_token_was_cut() -> None:
    (a,) = agent_records(Trace.from_json({
        "topology": {"agents": [{"name": "s", "role": "math_solver", "capacity": "small"}]},
        "events": [{"type": "return", "agent": "s", "completion_tokens": 64, "t": 1.0}]}))
    assert finish_reason(a, 64) == "length" and finish_reason(a, 65) == "stop" and finish_reason(a, None) == "stop"


def test_the_langfuse_endpoint_in_the_help_takes_traces(stored: Stored, _isolated_home: Path) -> None:
    """The Langfuse URL `--help` shows is one Langfuse answers: its OTLP path ends in /v1/traces."""
    shown = lemon("export", "otel", "--help", home=_isolated_home)
    assert shown.returncode == 0, shown.stderr
    (url,) = re.findall(r"https://cloud\.langfuse\.com(/\S*)", shown.stdout)
    with otlp_receiver(LANGFUSE_TRACES) as (base, received):
        sent = lemon("export", "otel", stored.good, "--endpoint", base + url, "--store", str(stored.store),
                     home=_isolated_home)
    assert sent.returncode == 0, sent.stderr
    assert received and f"sent {7 * len(stored.items)} spans" in sent.stdout
    with otlp_receiver(LANGFUSE_TRACES) as (base, received):
        bare = lemon("export", "otel", stored.good, "--endpoint", base + "/api/public/otel", "--store",
                     str(stored.store), home=_isolated_home)
    assert_one_line_error(bare, f"try {base}/api/public/otel/v1/traces")
    assert received == []
