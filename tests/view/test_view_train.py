"""The viewer's reading of a real `lemon train` run directory (the real trainer on the simulated pool)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lemon.inspection.view.build import training_page
from lemon.inspection.view.train import heat_segments, step_block, training_data

from .conftest import write_training_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_training_run(tmp_path_factory.mktemp("train") / "run", steps=10)


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(ln) for ln in path.read_text().splitlines()]


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 80), adv=st.floats(-3, 3), start=st.integers(-5, 90), length=st.integers(-3, 40),
       cf_total=st.floats(-2, 2))
def test_heat_segments_put_the_advantage_everywhere_and_cf_weight_delta_on_the_span(
        n: int, adv: float, start: int, length: int, cf_total: float) -> None:
    segs = heat_segments(n, adv, [start, start + length], cf_total)
    values = [v for s, e, v in segs for _ in range(s, e)]
    assert len(values) == n and [s for s, _, _ in segs] == sorted(s for s, _, _ in segs)
    lo, hi = max(0, min(start, n)), max(0, min(start + length, n))
    on_span = range(lo, hi) if hi > lo and cf_total != 0 else range(0)
    assert all(v == adv for i, v in enumerate(values) if i not in on_span)
    assert sum(values[i] - adv for i in on_span) == pytest.approx(cf_total if on_span else 0.0, abs=1e-9)


def test_training_data_reads_what_the_trainer_wrote(run_dir: Path) -> None:
    blocks: list[str] = []
    data = training_data(run_dir, blocks)
    metrics, samples = _rows(run_dir / "metrics.jsonl"), _rows(run_dir / "samples.jsonl")
    assert [m["step"] for m in data["metrics"]] == [m["step"] for m in metrics]
    assert all(m["distinct_teams"] == r["distinct_teams"] for m, r in zip(data["metrics"], metrics, strict=True))
    assert data["credit"]["cf_weight"] == 1.0 and data["credit"]["advantage_scale"] == "none" and data["has_info"]
    # the viewer's pairs per step are the trainer's own count of counterfactuals run
    assert [s["pairs"] for s in data["steps"]] == [m["cf_count"] for m in metrics]
    assert sum(s["n"] for s in data["steps"]) == len(samples) and len(blocks) == len(metrics)
    for step, m in zip(data["steps"], metrics, strict=True):
        block = json.loads(blocks[step["block"]])
        assert [g["task"] for g in block["groups"]] == m["task_ids"]
        for g in block["groups"]:
            assert sum(x["adv"] for x in g["samples"]) == pytest.approx(0.0, abs=1e-9)  # centred per group
            for x in g["samples"]:
                assert x["heat"][0][0] == 0 and x["heat"][-1][1] == len(x["text"])


def test_a_task_drawn_twice_in_one_step_is_two_groups() -> None:
    rows = [{"step": 3, "task_id": "t", "sample": k, "completion": "ab", "reward": r, "cf": None}
            for k, r in ((0, 1.0), (1, 0.0), (0, 0.5), (1, 0.5))]
    block = step_block(3, rows, cf_weight=1.0)
    assert [[x["adv"] for x in g["samples"]] for g in block["groups"]] == [[0.5, -0.5], [0.0, 0.0]]


def test_edit_descriptions_come_from_the_run_or_from_the_stored_field() -> None:
    """A run stores each edit in its family's words (`edit`), which the viewer shows as is; an older run
    without them shows the field with its value before and after, read from the stored span, whatever the family
    (no per-family wording in the viewer)."""
    text = 'agents:\n  - name: solver\n    role: math_solver\n    duty: "Solve."\n    capacity: large\n'
    duty, cap = text.index("Solve."), text.index("large")
    rows = [{"step": 1, "task_id": "t", "sample": k, "completion": text, "reward": 0.0, "cf": cf}
            for k, cf in enumerate([
                {"family": "role", "field": {"kind": "duty", "agent": "solver"}, "delta": 1.0,
                 "span": [duty, duty + 6], "edit": "revert duty of solver to base role math_solver"},
                {"family": "capacity", "field": {"kind": "capacity", "agent": "solver"}, "delta": 0.5,
                 "span": [cap, cap + 5], "edited_value": "medium"},
                {"family": "edge", "field": {"kind": "edge", "agent": "checker", "parent": "solver"}, "delta": 0.0,
                 "span": [0, 1]}])]
    edits = [x["cf"]["edit"] for x in step_block(1, rows, cf_weight=0.5)["groups"][0]["samples"]]
    assert edits == ["revert duty of solver to base role math_solver",
                     "capacity: capacity of solver: large \u2192 medium",
                     "edge: edge of checker \u2190 solver: a \u2192 (none)"]


def test_at_most_max_steps_are_embedded_first_and_last_always(run_dir: Path) -> None:
    blocks: list[str] = []
    data = training_data(run_dir, blocks, max_steps=4)
    embedded = [s["step"] for s in data["steps"] if s["block"] >= 0]
    assert len(blocks) == len(embedded) == 4 and embedded[0] == 1 and embedded[-1] == 10
    page = training_page([run_dir], max_steps=4)
    assert page.count('type="application/json" id="trace-') == 4


def test_a_torn_last_line_and_a_missing_run_json_still_show(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "metrics.jsonl").write_text((run_dir / "metrics.jsonl").read_text() + '{"step": 11, "rew')
    (copy / "samples.jsonl").write_text((run_dir / "samples.jsonl").read_text())
    data = training_data(copy, [])
    assert len(data["metrics"]) == 10 and not data["has_info"] and data["credit"]["cf_weight"] == 1.0


def test_a_stored_edited_level_is_named_in_the_edit() -> None:
    from lemon.inspection.view.train import _edit_text

    text = "agents:\n  - name: a\n    role: math_solver\n    capacity: large\n"
    start = text.index("large")
    cf = {"family": "level", "field": {"kind": "capacity", "agent": "a"}, "span": [start, start + 5],
          "edited_value": "small"}
    assert _edit_text(cf, text).endswith("large \u2192 small")
