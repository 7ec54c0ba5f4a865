"""`lemon view` in a real headless Chromium: the DAG, an agent's output on click, the diff, the attribution chart."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from selenium.webdriver.common.by import By

from lemon.evaluation.report import mcnemar_exact
from lemon.evaluation.store import ItemRow, ResultsStore
from lemon.inspection.explain import explain_stored, plan_stored
from lemon.inspection.view.build import store_page

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
    train_dir = write_training_run(tmp_path / "train-run", steps=12)
    page = tmp_path / "view.html"
    proc = lemon("view", str(stored.store), "--train", str(train_dir), "--file", str(page), home=_isolated_home)
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
        assert shown == trace.contents["checker"].strip() and "[bold red]not markup[/]" in shown
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
        # a training run of the real trainer: curves, a counterfactual pair, the heat map, team diversity
        _check_training_view(d, page, train_dir)
        assert js_errors(d) == []


def _pair_to_show(train_dir: Path) -> tuple[dict, list[dict], int]:  # type: ignore[type-arg]
    """A sample with a nonzero Δ, its (step, task) group, and the pairs page of its step it is on."""
    rows = [json.loads(ln) for ln in (train_dir / "samples.jsonl").read_text().splitlines()]
    pick = next(r for r in rows if r["cf"] and r["cf"]["delta"] != 0)
    group = [r for r in rows if (r["step"], r["task_id"]) == (pick["step"], pick["task_id"])]
    order = [r for r in rows if r["step"] == pick["step"] and r["cf"]]
    return pick, group, order.index(pick) // 6


def _check_training_view(d, page: Path, train_dir: Path) -> None:  # type: ignore[no-untyped-def]
    metrics = [json.loads(ln) for ln in (train_dir / "metrics.jsonl").read_text().splitlines()]
    cf_weight = json.loads((train_dir / "run.json").read_text())["config"]["credit"]["cf_weight"]
    pick, group, pairs_page = _pair_to_show(train_dir)
    _open(d, page, f"#train/0?s={pick['step']}&g=0&pp={pairs_page}")
    curves = {c.get_attribute("data-key"): c for c in d.find_elements(By.CSS_SELECTOR, "#curves svg.curve")}
    for key in ("reward_mean", "accuracy", "valid_rate", "entropy", "weight_change"):
        line = curves[key].find_element(By.TAG_NAME, "polyline")
        assert line.get_attribute("data-n") == str(len(metrics)), key
    teams = d.find_element(By.CSS_SELECTOR, '#diversity-chart polyline[data-key="distinct_teams"]')
    assert teams.get_attribute("data-n") == str(len(metrics))
    assert len(teams.get_attribute("points").split()) == len(metrics)
    # the pair: the original spec with the edited field's span highlighted, its family, field and Δ
    card = d.find_element(By.CSS_SELECTOR, f'#cf-pairs .pair[data-task="{pick["task_id"]}"]'
                                           f'[data-sample="{pick["sample"]}"]')
    start, end = pick["cf"]["span"]
    assert card.find_element(By.CSS_SELECTOR, ".hl").get_attribute("textContent") == pick["completion"][start:end]
    assert card.find_element(By.CSS_SELECTOR, ".delta").text == f"\u0394 {pick['cf']['delta']:+.3f}"
    assert pick["cf"]["family"] in card.text and pick["cf"]["field"]["agent"] in card.text
    # the heat map of its group: group advantage on every character, + cf_weight·Δ spread over the span
    card.find_element(By.LINK_TEXT, "heat map of its group").click()
    time.sleep(0.2)
    assert d.find_element(By.ID, "heatmap").get_attribute("data-task") == pick["task_id"]
    adv = pick["reward"] - sum(r["reward"] for r in group) / len(group)
    sample = d.find_element(By.CSS_SELECTOR, f'#heatmap .heat-sample[data-sample="{pick["sample"]}"]')
    segs = sample.find_elements(By.CSS_SELECTOR, "pre.heat .seg")
    assert "".join(s.get_attribute("textContent") for s in segs) == pick["completion"]
    on_span = [s for s in segs if "cfspan" in s.get_attribute("class")]
    assert [s.get_attribute("textContent") for s in on_span] == [pick["completion"][start:end]]
    expected = adv + cf_weight * pick["cf"]["delta"] / (end - start)
    assert abs(float(on_span[0].get_attribute("data-v")) - expected) < 1e-9
    assert all(abs(float(s.get_attribute("data-v")) - adv) < 1e-9 for s in segs if s not in on_span)


def _big_store(path: Path, n: int) -> str:
    def trace(i: int) -> str:
        return ('{"topology":{"agents":[{"name":"solver","role":"math_solver","capacity":"small"}],"output":"solver"},'
                '"events":[],"contents":{"solver":"The answer is 1."},'
                f'"task":"A farm in valley {i} has {i % 90} sheep and twice as many goats. How many animals?"}}')
    with ResultsStore(path) as db:
        db.ensure_run("big0000000000000", benchmark="gsm8k", split="test", method="cot", pool="p", level="small",
                      seeds=1, n_items=n, config={})
        for i in range(n):
            db.put("big0000000000000", ItemRow(item_id=f"gsm8k/test/{i}", seed=0, prediction=str(i % 7),
                                               gold=str(i % 5), correct=i % 7 == i % 5,
                                               tokens={"solver": {"prompt": 80, "completion": 40}},
                                               total_tokens=120, latency_s=0.5, trace_id=None, status="ok",
                                               trace_json=trace(i)))
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
        t0 = time.perf_counter()
        _open(d, page, f"#run/{run_id}?f=all&q=valley%209876%20&p=0&s=tok&d=desc")  # task text, every item
        found = [r.get_attribute("data-item") for r in d.find_elements(By.CSS_SELECTOR, "#items-table tr.item-row")]
        search_s = time.perf_counter() - t0
        assert found == ["gsm8k/test/9876"]
        _open(d, page, f"#item/{run_id}/{quote('gsm8k/test/9999', safe='')}/0")
        assert d.find_elements(By.ID, "no-trace")  # beyond --max-traces: the page says how to open it
        assert js_errors(d) == []
    print(f"10k items: build {build_s:.2f}s, {len(html) / 1e6:.2f} MB, first page {load_s:.2f}s, "
          f"last page {page_s:.2f}s, search in all task texts {search_s:.2f}s")
    assert build_s < 20 and load_s < 10 and page_s < 10 and search_s < 10


def test_view_bad_input(stored: Stored, tmp_path: Path, _isolated_home: Path) -> None:
    out = tmp_path / "v.html"
    assert_one_line_error(lemon("view", "nope", "--store", str(stored.store), "--file", str(out), home=_isolated_home),
                          "no run 'nope'")
    empty = tmp_path / "empty-run"
    empty.mkdir()
    assert_one_line_error(lemon("view", str(empty), "--file", str(out), home=_isolated_home), "no metrics.jsonl")
    assert_one_line_error(lemon("view", stored.good, "--item", "multiarith/nope", "--store", str(stored.store),
                                "--file", str(out), home=_isolated_home), "has no item")
    assert not out.exists()  # nothing written half-way
