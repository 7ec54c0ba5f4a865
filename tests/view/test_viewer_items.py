"""The viewer's sample table and item page in a real headless Chromium (issue 23): a run summary and no literal
`null`, search in all text, sortable columns; the vote's tally, a timeline with queueing apart from model time,
per-agent and per-level tokens, expand-all, cache hits, a stop rule's early stop."""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import quote

from selenium.webdriver.common.by import By

from lemon.evaluation.store import ResultsStore
from lemon.inspection.tracefile import trace_store
from lemon.inspection.view.build import store_page
from lemon.llm.cache import CachedBackend, SQLiteCache
from lemon.spec.model import StopRule

from .browser import chromium, js_errors
from .conftest import Stored
from .test_honest_items import _run, _team, _voters


def _open(driver, page: Path, hash_: str) -> None:  # type: ignore[no-untyped-def]
    driver.get(f"file://{page}{hash_}")
    time.sleep(0.2)


def _unique_word(stored: Stored, item: str) -> str:
    """A word of `item`'s question that no other question of the run has (the search must find it by text)."""
    others = {w for i, q in stored.questions.items() if i != item for w in re.findall(r"[a-z]+", q.lower())}
    return max((w for w in re.findall(r"[a-z]+", stored.questions[item].lower()) if w not in others), key=len)


def _item_ids(d) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.get_attribute("data-item") for r in d.find_elements(By.CSS_SELECTOR, "#items-table tr.item-row")]


def test_the_sample_table_summarises_searches_all_text_and_sorts(stored: Stored, tmp_path: Path) -> None:
    page = tmp_path / "view.html"
    with ResultsStore(stored.store) as db:
        page.write_text(store_page(db))
        tokens = {r.item_id: r.total_tokens for r in db.items(stored.bad)}
    with chromium() as d:
        _open(d, page, f"#run/{stored.bad}")
        body = d.find_element(By.TAG_NAME, "body").text
        assert not re.search(r"\bnull\b", body), body  # no attribution: nothing printed, not "null"
        summary = d.find_element(By.ID, "run-summary").text
        assert "50.0% of 6" in summary and "tokens / item" in summary and "small" in summary
        heads = [h.text for h in d.find_elements(By.CSS_SELECTOR, "#items-table th")]
        assert heads[:9] == ["item", "seed", "result", "task", "gold", "prediction", "tokens", "latency", "status"]
        target = stored.items[3]
        search = d.find_element(By.ID, "search")
        search.send_keys(_unique_word(stored, target) + "\n")
        time.sleep(0.2)
        assert _item_ids(d) == [target]  # found by a word of its task text, not by its id
        _open(d, page, f"#run/{stored.bad}")
        d.find_element(By.CSS_SELECTOR, 'th[data-sort="tok"]').click()
        time.sleep(0.1)
        d.find_element(By.CSS_SELECTOR, 'th[data-sort="tok"]').click()
        time.sleep(0.1)
        shown = [tokens[i] for i in _item_ids(d)]
        assert shown == sorted(tokens.values(), reverse=True) and "d=desc" in d.current_url
        assert js_errors(d) == []


def _page_of(trace_file: Path, page: Path) -> str:
    """The page `lemon view TRACE` writes, opened on its one item; returns the item's route."""
    db, run = trace_store(trace_file)
    with db:
        page.write_text(store_page(db, run_ids=[run.run_id], focus=(run.run_id, "task", 0), source=str(trace_file)))
    return f"#item/{quote(run.run_id, safe='')}/task/0"


def test_the_item_page_shows_tally_timeline_tokens_and_expands_all(tmp_path: Path) -> None:
    answers = ["The answer is 5.", "The answer is 6.", "So 5."]
    cache = SQLiteCache(tmp_path / "llm-cache.sqlite")
    queued = _run(CachedBackend(_voters(answers, latency_s=0.2), cache), _team(3), tmp_path, concurrency=1)
    cached = _run(CachedBackend(_voters(answers, latency_s=0.2), cache), _team(3), tmp_path / "again")
    stopped = _run(_voters(["The answer is 5."] * 4), _team(4, StopRule(agree=2)), tmp_path / "stop")
    pages = {name: tmp_path / f"{name}.html" for name in ("queued", "cached", "stopped")}
    routes = {name: _page_of(f, pages[name]) for name, f in (("queued", queued), ("cached", cached),
                                                              ("stopped", stopped))}
    with chromium() as d:
        _open(d, pages["queued"], routes["queued"])
        vote = d.find_element(By.CSS_SELECTOR, '#dag .node[data-agent="vote"]')
        assert "tally 5 \u00d72 \u00b7 6 \u00d71" in vote.text
        vote.click()
        detail = d.find_element(By.ID, "agent-detail").text
        assert "5 \u00d72 (v0, v2)" in d.find_element(By.ID, "agent-tally").text and "not recorded" not in detail
        waits = [float(r.get_attribute("data-s")) for r in d.find_elements(By.CSS_SELECTOR, "#timeline rect.queue")]
        models = [float(r.get_attribute("data-s")) for r in d.find_elements(By.CSS_SELECTOR, "#timeline rect.model")]
        assert max(waits) >= 0.39 and all(0.19 <= m < max(waits) for m in models[:3])
        rows = d.find_elements(By.CSS_SELECTOR, "#token-table tr[data-agent]")
        assert [r.get_attribute("data-agent") for r in rows] == ["v0", "v1", "v2", "vote"]
        level = d.find_element(By.CSS_SELECTOR, '#level-table tr[data-level="large"]').text.split()
        assert level[:2] == ["large", "4"]
        assert not any(x.get_attribute("open") for x in d.find_elements(By.CSS_SELECTOR, "details.agent"))
        d.find_element(By.ID, "expand-all").click()
        opened = d.find_elements(By.CSS_SELECTOR, "details.agent[open]")
        assert len(opened) == 4 and "The answer is 6." in opened[1].text
        _open(d, pages["cached"], routes["cached"])
        d.find_element(By.CSS_SELECTOR, '#dag .node[data-agent="v0"]').click()
        assert d.find_element(By.ID, "agent-cache").text == "cache hit yes"
        assert "cache hit" in d.find_element(By.CSS_SELECTOR, '#dag .node[data-agent="v1"]').text
        _open(d, pages["stopped"], routes["stopped"])
        rule = d.find_element(By.CSS_SELECTOR, "#item-head .stop-rule").text
        assert "stop rule {agree: 2}" in rule and "not run: v2, v3" in rule
        unrun = d.find_elements(By.CSS_SELECTOR, "#dag .node.unrun")
        assert [n.get_attribute("data-agent") for n in unrun] == ["v2", "v3"]
        assert "stop: final_answer" in d.find_element(By.ID, "stop").text
        assert js_errors(d) == []
