"""The viewer as issue 52 (point 15) found it, in a real headless Chromium: search filters as one types and reads
the agents' outputs too; a wide tokens table scrolls instead of being clipped; a code answer (and a code vote's
tally) keeps its lines; a reply cut at its max_tokens is marked, with each call's sampling settings; and
`lemon view --watch` keeps the page current while a store fills, until Ctrl-C (exit 130)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By

from lemon.evaluation.store import ItemRow, ResultsStore
from lemon.inspection.tracefile import trace_store, vote_key
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.spec.model import Agent, Spec
from lemon.spec.roles import RoleLibrary
from tests.pools import scripted_pool

from .browser import chromium, js_errors
from .conftest import lemon

TASK = 'Complete the function.\n```python\ndef add(a, b):\n    """Return a + b."""\n```'
CODE = "def add(a, b):\n    return a + b\n"
REPLIES = {  # voter i's reply; the third is longer than max_tokens (64 words, the scripted double's tokens)
    0: f"Here is my solution, zanzibar.\n```python\n{CODE}```",
    1: f"Another take.\n```python\n{CODE}```",
    2: "I will think about it at length. " * 20,
}
MODEL = "scripted-" + "w" * 110  # a model id wider than its column: the tokens table must scroll


def _code_trace(folder: Path) -> Path:
    """A `lemon run`-style trace: three programmers and a vote on a code task; one reply cut at max_tokens."""
    def reply(request: ChatRequest) -> str:
        system = request.messages[0].content
        return next(r for i, r in REPLIES.items() if f"Voter {i}." in system)

    voters = tuple(Agent(name=f"v{i}", role="programmer", duty=f"Voter {i}.", capacity="large") for i in REPLIES)
    spec = Spec(agents=(*voters, Agent(name="vote", role="majority_vote", capacity="large",
                                       depends_on=tuple(v.name for v in voters))), output="vote")
    pool = scripted_pool(ScriptedBackend(MODEL, responder=reply))
    result = asyncio.run(Executor(pool, RoleLibrary.load(), params=GenParams(temperature=0.7, max_tokens=64))
                         .run(spec, TASK, vote_key=vote_key("code")))
    assert result.status == "ok", result.stop_reason
    return result.trace.save(folder / f"trace-{result.trace.trace_id}.json")


def _rows(d) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.get_attribute("data-item") for r in d.find_elements(By.CSS_SELECTOR, "#items-table tr.item-row")]


def _rows_become(d, expected: list[str], timeout: float = 30.0) -> list[str]:  # type: ignore[no-untyped-def]
    """The table's rows once they are `expected` (or at the deadline): the page redraws as one types, and a
    watched page reloads itself, so a read may meet a table being replaced."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            rows = _rows(d)
        except StaleElementReferenceException:
            rows = None
        if rows == expected or time.monotonic() > deadline:
            return rows or []
        time.sleep(0.1)


def _type(d, text: str) -> None:  # type: ignore[no-untyped-def]
    box = d.find_element(By.ID, "search")
    box.clear()
    box.send_keys(text)  # no Enter: the table follows the typing


@pytest.fixture
def code_page(tmp_path: Path, _isolated_home: Path) -> tuple[Path, str, str]:
    """The page `lemon view` writes for the code trace, and the run and item ids the trace is read as."""
    trace = _code_trace(tmp_path)
    page = tmp_path / "view.html"
    proc = lemon("view", str(trace), "--file", str(page), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    db, run = trace_store(trace)
    with db:
        (row,) = db.items(run.run_id)
    return page, run.run_id, row.item_id


def test_a_code_answer_and_a_code_vote_keep_their_lines(code_page: tuple[Path, str, str]) -> None:
    with chromium() as d:
        d.get(f"file://{code_page[0]}")
        time.sleep(0.3)
        prediction = d.find_element(By.ID, "prediction")
        assert prediction.text == CODE.rstrip()  # its lines, not one line
        d.find_element(By.CSS_SELECTOR, '#dag .node[data-agent="vote"]').click()
        tally = d.find_element(By.ID, "agent-tally")
        assert [p.text for p in tally.find_elements(By.CSS_SELECTOR, "pre.answer")] == [CODE.rstrip()]
        assert "zanzibar" not in tally.text and "x2 (v0, v1)" in tally.text.replace("\u00d7", "x")  # the program
        assert js_errors(d) == []


def test_a_reply_cut_at_max_tokens_is_marked_with_its_sampling(code_page: tuple[Path, str, str]) -> None:
    with chromium() as d:
        d.get(f"file://{code_page[0]}")
        time.sleep(0.3)
        d.find_element(By.CSS_SELECTOR, '#dag .node[data-agent="v2"]').click()
        assert d.find_element(By.ID, "agent-cut").text == "reply cut at max_tokens 64"
        assert "temperature 0.7" in d.find_element(By.ID, "agent-sampling").text
        assert "(cut)" in d.find_element(By.CSS_SELECTOR, '#token-table tr[data-agent="v2"]').text
        d.find_element(By.CSS_SELECTOR, '#dag .node[data-agent="v0"]').click()
        assert not d.find_elements(By.ID, "agent-cut") and d.find_elements(By.ID, "agent-sampling")


def test_a_wide_tokens_table_scrolls_instead_of_being_clipped(code_page: tuple[Path, str, str]) -> None:
    with chromium() as d:
        d.get(f"file://{code_page[0]}")
        time.sleep(0.3)
        box = d.find_element(By.ID, "token-table").find_element(By.XPATH, "..")
        width, inner, right = d.execute_script(
            "const b = arguments[0]; return [b.scrollWidth, b.clientWidth, b.getBoundingClientRect().right];", box)
        assert width > inner and right <= d.execute_script("return document.documentElement.clientWidth")
        assert d.execute_script("return getComputedStyle(arguments[0]).overflowX", box) in ("auto", "scroll")


def test_search_filters_as_one_types_and_reads_agent_outputs(code_page: tuple[Path, str, str]) -> None:
    page, run_id, item_id = code_page
    with chromium() as d:
        d.get(f"file://{page}#run/{run_id}")
        time.sleep(0.3)
        _type(d, "zanzibarx")
        assert _rows_become(d, []) == [] and d.switch_to.active_element.get_attribute("id") == "search"
        _type(d, "zanzibar")  # only v0's output says it (not the task, the prediction or the gold)
        assert _rows_become(d, [item_id]) == [item_id]
        assert "q=zanzibar&" in d.current_url  # the address keeps the query (reload, back)
        assert js_errors(d) == []


def _put(db: ResultsStore, run_id: str, i: int) -> None:
    db.put(run_id, ItemRow(item_id=f"gsm8k/test/{i}", seed=0, prediction="1", gold="1", correct=True,
                           tokens={"solver": {"prompt": 8, "completion": 4}}, total_tokens=12, latency_s=0.1,
                           trace_id=None, status="ok", trace_json=None))


def _start_watch(tmp_path: Path, home: Path,
                 sigint: object = signal.SIG_DFL) -> tuple[subprocess.Popen[str], Path, Path]:
    """A store with one item and `lemon view --watch 1` on it (started with SIGINT's disposition `sigint`), once
    its first page is written: the process, the store, the page."""
    store, page = tmp_path / "r.sqlite", tmp_path / "view.html"
    with ResultsStore(store) as db:
        db.ensure_run("live000000000000", benchmark="gsm8k", split="test", method="cot", pool="p", level="small",
                      seeds=1, n_items=50, config={})
        _put(db, "live000000000000", 0)
    env = {**os.environ, "LEMON_HOME": str(home), "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "lemon.cli.main", "view", str(store), "--file", str(page),
                             "--watch", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    deadline = time.monotonic() + 180  # the first page: a loaded CI machine starts Python slowly
    while not page.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc, store, page


def _ctrl_c(proc: subprocess.Popen[str]) -> str:
    """Ctrl-C to the watch, and its stderr; never left running (a hang is said, not waited out)."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "lemon view --watch did not stop within 60 s of Ctrl-C"


def test_watch_keeps_the_page_current_until_ctrl_c(tmp_path: Path, _isolated_home: Path) -> None:
    proc, store, page = _start_watch(tmp_path, _isolated_home)
    try:
        assert page.exists(), "lemon view --watch wrote no page in 180 s"
        with chromium() as d:
            d.get(f"file://{page}#run/live000000000000")
            time.sleep(0.3)
            assert _rows_become(d, ["gsm8k/test/0"]) == ["gsm8k/test/0"]
            assert "live" in d.find_element(By.ID, "watch").text
            with ResultsStore(store) as db:
                _put(db, "live000000000000", 1)  # as `lemon eval` adds an item
            both = ["gsm8k/test/0", "gsm8k/test/1"]
            assert _rows_become(d, both, timeout=60) == both  # the page reloads itself
            assert d.current_url.endswith("#run/live000000000000")  # where the reader was
            assert js_errors(d) == []
    finally:
        err = _ctrl_c(proc)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("interrupted: the page written last")
    assert page.is_file() and "gsm8k/test/1" in page.read_text()


def test_watch_stops_on_ctrl_c_even_when_started_with_sigint_ignored(tmp_path: Path, _isolated_home: Path) -> None:
    """A script's background job (or a test runner) hands SIGINT over ignored; Ctrl-C is still the watch's stop."""
    proc, _, page = _start_watch(tmp_path, _isolated_home, signal.SIG_IGN)
    assert page.exists(), "lemon view --watch wrote no page in 180 s"
    time.sleep(0.5)  # past the page's write, into the watch loop
    err = _ctrl_c(proc)
    assert proc.returncode == 130, err
