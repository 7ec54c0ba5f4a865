"""`lemon view` in a real headless Chromium: the DAG, an agent's output on click, the diff, the attribution chart."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from selenium.webdriver.common.by import By

from lemon.bench.explain import explain_stored, plan_stored
from lemon.bench.report import mcnemar_exact
from lemon.bench.store import ItemRow, ResultsStore
from lemon.bench.view.build import store_page

from .browser import chromium, js_errors
from .conftest import Stored, add_prompted_run, assert_one_line_error, lemon, write_training_run


def _explain_first(stored: Stored, data_dir: Path) -> dict:  # type: ignore[type-arg]
    with ResultsStore(stored.store) as db:
        run = db.run(stored.good)
        assert run is not None
        row = next(r for r in db.items(stored.good) if r.item_id == stored.items[0])
        trace = db.trace(stored.good, row.item_id)
        assert trace is not None
        plan = plan_stored(run, row, trace, stored.good_pool(), data_dir=data_dir)
        return asyncio.run(explain_stored(db, plan)).to_json()


def _open(driver, page: Path, hash_: str) -> None:  # type: ignore[no-untyped-def]
    driver.get(f"file://{page}{hash_}")
    time.sleep(0.2)


def test_viewer_pages_in_chromium(stored: Stored, tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    attribution = _explain_first(stored, data_dir)
    dead_run = add_prompted_run(stored.store, data_dir)
    train_dir = write_training_run(tmp_path / "train-run")
    page = tmp_path / "view.html"
    proc = lemon("view", str(stored.store), "--train", str(train_dir), "--out", str(page), home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html  # offline
    with ResultsStore(stored.store) as db:
        trace = db.trace(stored.good, stored.items[0])
        dead_item = db.items(dead_run)[0]
    assert trace is not None
    with chromium() as d:
        # one item: the DAG shows every live agent with its capacity; a click shows the agent's output
        _open(d, page, f"#item/{stored.good}/{quote(stored.items[0], safe='')}/0")
        nodes = d.find_elements(By.CSS_SELECTOR, "#dag .node.live")
        assert sorted(n.get_attribute("data-agent") for n in nodes) == ["checker", "final", "solver"]
        assert all(n.get_attribute("data-capacity") == "small" and "small" in n.text for n in nodes)
        d.find_element(By.CSS_SELECTOR, '#dag .node[data-agent="checker"]').click()
        shown = d.find_element(By.ID, "agent-output").text
        assert shown == trace["contents"]["checker"].strip() and "[bold red]not markup[/]" in shown
        detail = d.find_element(By.ID, "agent-detail").text
        assert "model scripted-good" in detail and "prompt +" in detail and "cache hit" in detail
        # the attribution chart: one bar per edit that ran
        bars = d.find_elements(By.CSS_SELECTOR, "#attribution-chart rect.bar")
        assert len(bars) == sum(e["status"] == "ran" for e in attribution["edits"]) == 2
        assert {b.get_attribute("data-field") for b in bars} == {e["field"] for e in attribution["edits"]}
        # a spec with a dead agent: marked, with three capacity levels on the live ones
        _open(d, page, f"#item/{dead_run}/{quote(dead_item.item_id, safe='')}/0")
        dead = d.find_elements(By.CSS_SELECTOR, "#dag .node.dead")
        assert [n.get_attribute("data-agent") for n in dead] == ["helper"]
        live = {n.get_attribute("data-agent"): n.get_attribute("data-capacity")
                for n in d.find_elements(By.CSS_SELECTOR, "#dag .node.live")}
        assert live == {"solver": "small", "final": "large"}
        assert "stop: final_answer" in d.find_element(By.ID, "stop").text
        # two runs on the same items: the regressed items (good right, bad wrong) and the paired test
        _open(d, page, f"#diff/{stored.good}/{stored.bad}")
        regressed = [r.find_element(By.TAG_NAME, "td").text
                     for r in d.find_elements(By.CSS_SELECTOR, "#regressed tr.diff-row")]
        assert regressed == [i for k, i in enumerate(stored.items) if k % 2 == 1]
        assert not d.find_elements(By.CSS_SELECTOR, "#improved tr.diff-row")
        assert f"p = {mcnemar_exact(3, 0):.4g}" in d.find_element(By.ID, "diff-summary").text
        # an evaluation run with a filter
        _open(d, page, f"#run/{stored.bad}?f=wrong&q=&p=0")
        assert len(d.find_elements(By.CSS_SELECTOR, "#items-table tr.item-row")) == 3
        # a training run: curves and the counterfactual pair with its edited field highlighted
        _open(d, page, "#train/0")
        assert len(d.find_elements(By.CSS_SELECTOR, "#curves svg.curve polyline")) >= 4
        assert d.find_element(By.CSS_SELECTOR, "#cf-pairs .hl").text == "Solve it."
        assert js_errors(d) == []


def _big_store(path: Path, n: int) -> str:
    trace = '{"topology":{"agents":[{"name":"solver","role":"math_solver","capacity":"small"}],"output":"solver"},' \
            '"events":[],"contents":{"solver":"The answer is 1."}}'
    with ResultsStore(path) as db:
        db.ensure_run("big0000000000000", benchmark="gsm8k", split="test", method="cot", pool="p", level="small",
                      seeds=1, n_items=n, config={})
        for i in range(n):
            db.put("big0000000000000", ItemRow(item_id=f"gsm8k/test/{i}", seed=0, prediction=str(i % 7),
                                               gold=str(i % 5), correct=i % 7 == i % 5,
                                               tokens={"solver": {"prompt": 80, "completion": 40}},
                                               total_tokens=120, latency_s=0.5, trace_id=None, status="ok",
                                               trace_json=trace))
    return "big0000000000000"


@pytest.mark.timeout(300)
def test_ten_thousand_items_stay_fast(tmp_path: Path) -> None:
    run_id = _big_store(tmp_path / "big.sqlite", 10_000)
    t0 = time.perf_counter()
    with ResultsStore(tmp_path / "big.sqlite") as db:
        html = store_page(db)
    build_s = time.perf_counter() - t0
    page = tmp_path / "big.html"
    page.write_text(html)
    assert len(html) < 5_000_000 and html.count('type="application/json" id="trace-') == 300
    with chromium() as d:
        t0 = time.perf_counter()
        _open(d, page, f"#run/{run_id}?f=all&q=&p=0")
        rows = d.find_elements(By.CSS_SELECTOR, "#items-table tr.item-row")
        load_s = time.perf_counter() - t0
        assert len(rows) == 50 and "page 1 of 200" in d.find_element(By.ID, "page-info").text
        t0 = time.perf_counter()
        _open(d, page, f"#run/{run_id}?f=all&q=&p=199")
        last = d.find_elements(By.CSS_SELECTOR, "#items-table tr.item-row")
        assert last[-1].get_attribute("data-item") == "gsm8k/test/9999"
        page_s = time.perf_counter() - t0
        _open(d, page, f"#item/{run_id}/{quote('gsm8k/test/9999', safe='')}/0")
        assert d.find_elements(By.ID, "no-trace")  # beyond --max-traces: the page says how to open it
        assert js_errors(d) == []
    print(f"10k items: build {build_s:.2f}s, {len(html) / 1e6:.2f} MB, first page {load_s:.2f}s, "
          f"last page {page_s:.2f}s")
    assert build_s < 20 and load_s < 10 and page_s < 10


def test_view_bad_input(stored: Stored, tmp_path: Path, _isolated_home: Path) -> None:
    out = tmp_path / "v.html"
    assert_one_line_error(lemon("view", "nope", "--store", str(stored.store), "--out", str(out), home=_isolated_home),
                          "no run 'nope'")
    empty = tmp_path / "empty-run"
    empty.mkdir()
    assert_one_line_error(lemon("view", str(empty), "--out", str(out), home=_isolated_home), "no metrics.jsonl")
    assert_one_line_error(lemon("view", stored.good, "--item", "multiarith/nope", "--store", str(stored.store),
                                "--out", str(out), home=_isolated_home), "has no item")
    assert not out.exists()  # nothing written half-way
