"""Build the viewer page: one static HTML file (inline CSS, JS and SVG; no network) from a store or a run dir.

Why a static file: it opens offline in any browser, can be attached to an issue or a paper's artifact, and needs
no server. Why it stays fast on a 10,000-item store: the item table is embedded as compact arrays and rendered
one page of 50 rows at a time, and each trace is its own inert `<script type="application/json">` block that
the page parses only when that item is opened. Traces are embedded for at most `max_traces` items per run
(the focused item, items with an attribution, items that differ between two comparable runs, then the first
items in order); the page says how to open any other one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from importlib import resources
from itertools import combinations
from pathlib import Path
from typing import Any

from lemon.evaluation.methods import shown_level
from lemon.evaluation.report import paired_compare
from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.inspection.itemview import shown_status
from lemon.inspection.view.train import DEFAULT_MAX_STEPS, training_data

DEFAULT_MAX_TRACES = 300


def _safe(json_text: str) -> str:
    """JSON that cannot end its <script> element: `<` only occurs inside strings, where \\u003c is the same."""
    return json_text.replace("<", "\\u003c")


def render_page(data: dict[str, Any], traces: Sequence[str]) -> str:
    """The template with the page data and the trace blocks spliced in (split, not str.replace: the data may
    contain the marker text itself)."""
    template = (resources.files("lemon.inspection.view") / "page.html").read_text("utf-8")
    head, rest = template.split("__LEMON_DATA__", 1)
    mid, tail = rest.split("__LEMON_TRACES__", 1)
    blob = _safe(json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str))
    blocks = "\n".join(f'<script type="application/json" id="trace-{i}">{_safe(t)}</script>'
                       for i, t in enumerate(traces))
    return head + blob + mid + blocks + tail


def _run_json(r: RunInfo) -> dict[str, Any]:
    return {"id": r.run_id, "benchmark": r.benchmark, "split": r.split, "method": r.method, "pool": r.pool,
            "level": shown_level(r.method, r.level), "seeds": r.seeds, "n_items": r.n_items,
            "temperature": r.config.get("temperature")}


def _comparisons(runs: Sequence[RunInfo], rows: dict[str, list[ItemRow]]) -> list[dict[str, Any]]:
    """The paired exact McNemar test (report.py) of every two runs on the same benchmark and split."""
    out = []
    for a, b in combinations(runs, 2):
        if (a.benchmark, a.split) != (b.benchmark, b.split):
            continue
        c = paired_compare(a, rows[a.run_id], b, rows[b.run_id])
        if c.pairs:
            out.append({"a": a.run_id, "b": b.run_id, "pairs": c.pairs, "a_only": c.a_only, "b_only": c.b_only,
                        "both_right": c.both_right, "both_wrong": c.both_wrong, "p": c.p_value, "seeds": c.seeds})
    return out


def _discordant(run_id: str, rows: dict[str, list[ItemRow]],
                comparisons: Iterable[dict[str, Any]]) -> list[tuple[str, int]]:
    mine = {(r.item_id, r.seed): r.correct for r in rows[run_id]}
    out: list[tuple[str, int]] = []
    for c in comparisons:
        if run_id not in (c["a"], c["b"]):
            continue
        other = {(r.item_id, r.seed): r.correct for r in rows[c["b"] if c["a"] == run_id else c["a"]]}
        out.extend(k for k, ok in other.items() if k in mine and mine[k] != ok)
    return out


def store_page(db: ResultsStore, *, run_ids: Sequence[str] | None = None, focus: tuple[str, str, int] | None = None,
               max_traces: int = DEFAULT_MAX_TRACES, train_dirs: Sequence[Path] = (),
               max_steps: int = DEFAULT_MAX_STEPS, source: str | None = None, watch: int | None = None) -> str:
    """The page for the runs of a store (all, or `run_ids`), optionally opening on one item; `source` names
    where the runs came from (default: the store's path; a `lemon run` trace file names itself); `watch`: the
    page reloads itself every that many seconds (`lemon view --watch` rewrites it)."""
    runs = [r for r in db.runs() if run_ids is None or r.run_id in run_ids]
    rows = {r.run_id: db.items(r.run_id) for r in runs}
    comparisons = _comparisons(runs, rows)
    traces: list[str] = []
    items: dict[str, list[list[Any]]] = {}
    explanations: dict[str, Any] = {}
    by_run: dict[str, list[str]] = {}
    for r in runs:
        explained = db.explanations(r.run_id)
        for e in explained:
            explanations[f"{r.run_id}|{e['item_id']}|{e['seed']}"] = e
        by_run[r.run_id] = [f"{e['item_id']}|{e['seed']}" for e in explained]
        wanted = _trace_keys(r.run_id, rows, comparisons, explained, focus, max_traces)
        found = db.traces(r.run_id, wanted)
        index: dict[tuple[str, int], int] = {}
        for k in wanted:
            if k in found:
                index[k] = len(traces)
                traces.append(found[k].compact_json())
        items[r.run_id] = _item_arrays(rows[r.run_id], index, db.task_texts(r.run_id))
    start = (f"#item/{_enc(focus[0])}/{_enc(focus[1])}/{focus[2]}" if focus else
             f"#run/{_enc(runs[0].run_id)}" if len(runs) == 1 else "#runs")
    data = {"schema": 1, "source": source or str(db.path), "generated": _now(),
            "runs": [{**_run_json(r), "tokens_by_level": _tokens_by_level(rows[r.run_id])} for r in runs],
            "items": items, "compare": comparisons, "explanations": explanations, "explanations_by_run": by_run,
            "train": [training_data(d, traces, max_steps) for d in train_dirs], "start": start, "watch": watch}
    return render_page(data, traces)


def _item_arrays(rows: Sequence[ItemRow], index: dict[tuple[str, int], int],
                 tasks: dict[tuple[str, int], str]) -> list[list[Any]]:
    """The run's items as compact arrays (the page's COL order): id, seed, right (1/0; None without a gold
    answer), worker tokens, status as read (`no answer` when nothing was extracted), prediction, gold, seconds,
    index of the embedded trace (-1: not embedded), task text (searched)."""
    return [[x.item_id, x.seed, None if x.gold is None else int(x.correct), x.total_tokens,
             shown_status(x.status, x.prediction), x.prediction, _short(x.gold), round(x.latency_s, 3),
             index.get((x.item_id, x.seed), -1), tasks.get((x.item_id, x.seed))] for x in rows]


def _tokens_by_level(rows: Sequence[ItemRow]) -> dict[str, int]:
    """Worker tokens of the whole run per capacity level (the run summary on top of its page)."""
    out: dict[str, int] = {}
    for x in rows:
        for t in x.tokens.values():
            level = str(t.get("capacity", "?"))
            out[level] = out.get(level, 0) + int(t.get("prompt", 0)) + int(t.get("completion", 0))
    return out


def _trace_keys(run_id: str, rows: dict[str, list[ItemRow]], comparisons: list[dict[str, Any]],
                explained: list[dict[str, Any]], focus: tuple[str, str, int] | None,
                max_traces: int) -> list[tuple[str, int]]:
    """Which items of a run get their trace embedded, most useful first, at most `max_traces`."""
    order: list[tuple[str, int]] = []
    if focus is not None and focus[0] == run_id:
        order.append((focus[1], focus[2]))
    order += [(e["item_id"], int(e["seed"])) for e in explained]
    order += _discordant(run_id, rows, comparisons)
    order += [(x.item_id, x.seed) for x in rows[run_id]]
    seen: dict[tuple[str, int], None] = {}
    for k in order:
        if len(seen) >= max_traces:
            break
        seen.setdefault(k, None)
    return list(seen)


def training_page(run_dirs: Sequence[Path], max_steps: int = DEFAULT_MAX_STEPS, watch: int | None = None) -> str:
    """The page of `lemon train` run directories only; each step's samples are an inert block (lazy)."""
    blocks: list[str] = []
    train = [training_data(d, blocks, max_steps) for d in run_dirs]
    data = {"schema": 1, "source": ", ".join(str(d) for d in run_dirs), "generated": _now(), "runs": [],
            "items": {}, "compare": [], "explanations": {}, "explanations_by_run": {}, "train": train,
            "start": "#train/0", "watch": watch}
    return render_page(data, blocks)


def _short(text: str | None, n: int = 300) -> str | None:
    return text if text is None or len(text) <= n else text[:n] + "..."


def _enc(s: str) -> str:
    from urllib.parse import quote

    return quote(s, safe="")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
