"""experiments/learning_summary.py reads a run's samples.jsonl: the level and size of what the policy wrote."""

from __future__ import annotations

import json
from pathlib import Path

from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.verified import candidate_specs
from tests.experiments import load_script


def test_shares_of_strongest_level_and_single_agent_specs_per_window(tmp_path: Path) -> None:
    teams = dict(candidate_specs("number", RoleLibrary.load(), ("small", "medium", "large")))
    rows = [  # step 1: two weak teams; step 2: cot@large and sc-cot@large (its vote's level does not matter)
        (1, "cot@small", 0.0), (1, "chain@medium", 0.0), (2, "cot@large", 1.0), (2, "sc-cot@large", 1.0)]
    lines = [json.dumps({"step": s, "valid": True, "completion": render_spec(teams[label]).text,
                         "success": ok, "tokens": 100}) for s, label, ok in rows]
    lines.append(json.dumps({"step": 2, "valid": False, "completion": "oops", "success": 0.0, "tokens": 0}))
    (tmp_path / "samples.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = load_script("learning_summary").summarize(tmp_path, 1, "large")
    assert "valid 2/2  success 0.00  all-large 0.00  one-agent 0.50" in out[1]
    assert "valid 2/3  success 1.00  all-large 1.00  one-agent 0.50" in out[2]
