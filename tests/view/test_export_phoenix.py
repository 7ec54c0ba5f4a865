"""`lemon export otel` into a real Arize Phoenix, started offline on 127.0.0.1 (issue 52, point 10): what Phoenix
stores and shows for each span is what the run did: the item a CHAIN, each agent an AGENT with its reply as its
output and its place in the agent graph, each model call an LLM with the reply as its output message.

Phoenix keeps no span links (the vote's links to its voters are checked on the OTLP request itself in
test_export_otel.py); it keeps OpenInference's graph node ids, which are what an agent graph is drawn from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openinference.semconv.trace import MessageAttributes as Msg
from openinference.semconv.trace import OpenInferenceSpanKindValues as Kind
from openinference.semconv.trace import SpanAttributes as OI

from lemon.inspection.export_otel import ROOT_NODE
from lemon.inspection.itemview import agent_records
from lemon.inspection.tracefile import read_trace
from tests.llm.servers import free_port, stop_process, wait_until_answers

from .conftest import Stored, lemon
from .test_honest_items import _run, _team, _voters

STARTUP_S = 240.0  # migrations and the app on a busy two-core machine: about 20 s when idle


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:  # the Phoenix this module started
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a real Phoenix server (its own SQLite in a temporary folder, no telemetry, no network)."""
    work = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = work / "phoenix.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "phoenix.server.main", "serve"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until_answers(f"http://127.0.0.1:{port}/healthz", proc, log.read_text, STARTUP_S)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc, grace_s=30)


def _spans(url: str, n: int) -> list[dict[str, Any]]:
    """The spans Phoenix holds, once all `n` are in (it ingests in the background)."""
    deadline = time.monotonic() + 60
    while True:
        spans = _get(f"{url}/v1/projects/default/spans?limit=1000")["data"]
        if len(spans) >= n or time.monotonic() > deadline:
            return spans
        time.sleep(0.25)


def _export(url: str, target: str, store: Path, home: Path) -> int:
    proc = lemon("export", "otel", target, "--endpoint", f"{url}/v1/traces", "--include-content", "--store",
                 str(store), home=home)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split("sent ")[1].split(" ")[0])


def test_phoenix_shows_the_agent_graph_and_each_reply(phoenix: str, stored: Stored, tmp_path: Path,
                                                      _isolated_home: Path) -> None:
    path = _run(_voters(["The answer is 5.", "The answer is 6.", "So 5."]), _team(3), tmp_path)
    trace = read_trace(path)
    sent = _export(phoenix, str(path), stored.store, _isolated_home)
    sent += _export(phoenix, stored.good, stored.store, _isolated_home)
    spans = _spans(phoenix, sent)
    assert len(spans) == sent
    vote_trace = next(s["context"]["trace_id"] for s in spans if s["name"] == "invoke_agent vote")
    mine = [s for s in spans if s["context"]["trace_id"] == vote_trace]
    kinds = {(s["name"].split(" ")[0], s["span_kind"]) for s in spans}
    assert kinds == {("lemon.item", Kind.CHAIN.value), ("invoke_agent", Kind.AGENT.value), ("chat", Kind.LLM.value)}
    assert {s["status_code"] for s in spans} == {"OK"}
    agents = {s["attributes"][OI.AGENT_NAME]: s for s in mine if s["span_kind"] == Kind.AGENT.value}
    ends = {a.name: a.end_s or 0.0 for a in agent_records(trace)}
    waited_for = max(("v0", "v1", "v2"), key=lambda v: ends[v])
    edges = {(s["attributes"][OI.GRAPH_NODE_PARENT_ID], s["attributes"][OI.GRAPH_NODE_ID]) for s in agents.values()}
    assert edges == {(ROOT_NODE, "v0"), (ROOT_NODE, "v1"), (ROOT_NODE, "v2"), (waited_for, "vote")}
    (root,) = [s for s in mine if s["parent_id"] is None]
    assert root["attributes"][OI.GRAPH_NODE_ID] == ROOT_NODE and "lemon.correct" not in root["attributes"]
    for name, s in agents.items():
        assert s["attributes"][OI.OUTPUT_VALUE] == trace.contents[name]  # the Output pane: the agent's reply
    for s in (s for s in mine if s["span_kind"] == Kind.LLM.value):
        reply = trace.contents[s["attributes"]["gen_ai.agent.name"]]
        assert s["attributes"][OI.OUTPUT_VALUE] == reply
        assert s["attributes"][f"{OI.LLM_OUTPUT_MESSAGES}.0.{Msg.MESSAGE_CONTENT}"] == reply
    scored = [s for s in spans if s["parent_id"] is None and s["context"]["trace_id"] != vote_trace]
    assert len(scored) == len(stored.items) and all(s["attributes"]["lemon.correct"] is True for s in scored)
