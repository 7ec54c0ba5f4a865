"""Regenerate docs/view-*.png: the viewer's pages for a demo store (scripted pools), shot in headless Chromium.

    PYTHONPATH=src:. python experiments/view_screenshots.py [DATA_DIR]

Uses the same fixtures as tests/view (a `chain` run right on every item, a `cot` run wrong on half of them, a
`prompted` run whose spec has a dead agent, an attribution, a `lemon run`-style trace of a vote of three on a
level that takes one call at a time (its tally, per-agent tokens and the timeline with queueing), and a 20-step
training run directory written by the real trainer on the simulated pool and slot policy: SIMULATED, not a LEMON
result).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from lemon.evaluation.store import ResultsStore
from lemon.inspection.explain import explain_stored, plan_stored
from lemon.inspection.tracefile import trace_store
from lemon.inspection.view.build import store_page
from tests.view.browser import chromium
from tests.view.conftest import add_prompted_run, build_store, write_training_run
from tests.view.test_honest_items import _run, _team, _voters


def vote_page(tmp: Path) -> tuple[Path, str]:
    """The page `lemon view TRACE` writes for a vote of three whose level takes one call at a time."""
    answers = ["The answer is 5.", "Step by step: 2 + 3 = 5. The answer is 5.", "The answer is 6."]
    trace_file = _run(_voters(answers, latency_s=0.3), _team(3), tmp, concurrency=1)
    db, run = trace_store(trace_file)
    with db:
        page = tmp / "vote.html"
        page.write_text(store_page(db, run_ids=[run.run_id], focus=(run.run_id, "task", 0), source=str(trace_file)))
    return page, f"#item/{run.run_id}/task/0"


def main(data_dir: Path, docs: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="lemon-view-"))
    stored = build_store(tmp / "results.sqlite", data_dir)
    dead_run = add_prompted_run(stored.store, data_dir)
    with ResultsStore(stored.store) as db:
        run = db.run(stored.good)
        assert run is not None
        row = next(r for r in db.items(stored.good) if r.item_id == stored.items[0])
        trace = db.trace(stored.good, row.item_id)
        assert trace is not None
        asyncio.run(explain_stored(db, plan_stored(run, row, trace, stored.good_pool(), data_dir=data_dir)))
        dead_item = db.items(dead_run)[0].item_id
        page = tmp / "view.html"
        train_dir = write_training_run(tmp / "train-run", steps=20)
        page.write_text(store_page(db, train_dirs=[train_dir]))
    vote, vote_hash = vote_page(tmp)
    shots = {  # name: (page, route, agent to click, window height)
        "view-item.png": (page, f"#item/{dead_run}/{quote(dead_item, safe='')}/0", "final", 1250),
        "view-attribution.png": (page, f"#item/{stored.good}/{quote(stored.items[0], safe='')}/0", "checker", 900),
        "view-run.png": (page, f"#run/{stored.bad}?f=all&q=&p=0&s=tok&d=desc", None, 900),
        "view-vote.png": (vote, vote_hash, "vote", 1250),
        "view-diff.png": (page, f"#diff/{stored.good}/{stored.bad}", None, 900),
        "view-train.png": (page, train_hash(train_dir), None, 1950),
    }
    with chromium(1400, 900) as d:
        for name, (html, hash_, click, height) in shots.items():
            d.set_window_size(1400, height)
            d.get(f"file://{html}{hash_}")
            time.sleep(0.3)
            if click:
                d.execute_script(f'document.querySelector(\'.node[data-agent="{click}"]\')'
                                 '.dispatchEvent(new MouseEvent("click", {bubbles: true}))')
                time.sleep(0.2)
            d.save_screenshot(str(docs / name))
            print("wrote", docs / name)


def train_hash(train_dir: Path) -> str:
    """The training view on the last step with a counterfactual of nonzero Δ, showing that sample's group."""
    rows = [json.loads(ln) for ln in (train_dir / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    pick = [r for r in rows if r["cf"] and r["cf"]["delta"] != 0][-1]
    tasks = list(dict.fromkeys(r["task_id"] for r in rows if r["step"] == pick["step"]))
    pairs = [r for r in rows if r["step"] == pick["step"] and r["cf"]]
    return f"#train/0?s={pick['step']}&g={tasks.index(pick['task_id'])}&pp={pairs.index(pick) // 6}"


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/data"), Path("docs"))
