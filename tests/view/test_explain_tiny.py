"""Acceptance: `lemon explain` on a stored run of a 3-agent spec with the REAL `tiny` pool (SmolLM2-135M)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from lemon.evaluation.store import ResultsStore
from lemon.llm.models import ensure_model
from tests.evalcall import evaluate_kw

from .conftest import lemon

DESCENDANTS = {"solver": ["checker", "final"], "checker": ["final"], "final": []}


def _expected_calls(edit: dict, pool_kind: str) -> int:  # type: ignore[type-arg]
    """Edited agent + its descendants in the edited spec that still reach the output.

    Except for capacity edits: in `tiny` every level is the same model, so the request does not change (0
    calls); in `two-models` the lower level is another model id over the SAME weights, so the edited agent is
    re-run (1 call) and, writing the very same text with the same seed, leaves its descendants' requests
    unchanged (node-cache hits). Calls count agents whose request changed, which is the point of the cache."""
    if edit["kind"] == "capacity":
        return 0 if pool_kind == "tiny" else 1
    if edit["kind"] == "edge" and edit["agent"] == "final":  # final no longer reads checker: only final runs
        return 1
    return 1 + len(DESCENDANTS[edit["agent"]])


@pytest.mark.models
@pytest.mark.parametrize("pool_kind", ["tiny", "two-models"])
def test_explain_reports_every_edit_and_its_calls(pool_kind: str, tmp_path: Path, data_dir: Path,
                                                  _isolated_home: Path) -> None:
    if pool_kind == "tiny":
        pool = "tiny"
    else:  # the same weights under two model ids, so lowering a capacity really changes the model called
        gguf = ensure_model("smollm2-135m")
        pool = str(tmp_path / "two.yaml")
        Path(pool).write_text("name: two\ndefaults: {temperature: 0.0, max_tokens: 24}\nlevels:\n"
                              "  - {name: small, backend: embedded, model: smollm2-135m}\n"
                              f"  - {{name: medium, backend: embedded, model: {gguf}}}\n")
    store = tmp_path / "r.sqlite"
    summary = asyncio.run(evaluate_kw("multiarith", "chain", limit=1, store=store, data_dir=data_dir, pool=pool,
                                      level="medium", cache=False, max_tokens=24))
    with ResultsStore(store) as db:
        (row,) = db.items(summary.run_id)
    assert row.status == "ok" and len(row.tokens) == 3
    proc = lemon("explain", summary.run_id[:8], row.item_id, "--store", str(store), "--data-dir", str(data_dir),
                 "--no-cache", "--json", home=_isolated_home, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "edit(s) to run, about" in proc.stderr  # the cost is said before anything runs
    att = json.loads(proc.stdout)
    fields = sorted(e["field"] for e in att["edits"])
    assert fields == sorted(["edge checker<-solver", "edge final<-checker", "capacity solver", "capacity checker",
                             "capacity final"])
    assert all(e["status"] == "ran" for e in att["edits"])
    expected = {e["field"]: _expected_calls(e, pool_kind) for e in att["edits"]}
    assert {e["field"]: e["calls"] for e in att["edits"]} == expected
    assert att["calls"] == sum(expected.values())
    for e in att["edits"]:
        assert e["delta"] in (-1.0, 0.0, 1.0) and e["tokens"] > 0 and e["cache_hits"] + e["calls"] >= 1
    with ResultsStore(store) as db:
        assert db.explanation(summary.run_id, row.item_id) == att  # stored with the run
