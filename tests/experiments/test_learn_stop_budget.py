"""experiments/learn_stop_budget.py: the format-2 trial policies, learned for a budget pooled over answer kinds,
from a bank `lemon eval` builds on the scripted test-double pool (its voters' answers are the double's, so what
is checked is the plumbing: every judged kind gets a policy file that loads and names its opening and floor, and
bad options are one line before any work)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lemon.spec.stops.policy import policy_from_json
from tests.evaluation.test_cli import scripted_pool_yaml

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "experiments" / "learn_stop_budget.py"


def _eval(env: dict[str, str], bench: str, split: str, method: str, pool: Path, store: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "lemon.cli.main", "eval", bench, "--method", method, "--agents",
                           "5", "--split", split, "--limit", "2", "--seeds", "1", "--pool", str(pool), "--level",
                           "large", "--store", str(store)], env=env, capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_judged_kind_gets_a_format_2_policy_for_the_pooled_budget(tmp_path: Path, data_dir: Path) -> None:
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", 0.0)
    store = tmp_path / "bank.sqlite"
    env = {**os.environ, "LEMON_HOME": str(tmp_path / "home"), "LEMON_DATA_DIR": str(data_dir), "COLUMNS": "200"}
    for bench, split in (("gsm8k", "train"), ("svamp", "train"), ("aqua", "dev"), ("mmlu", "dev")):
        for method in ("sc-cot", "sc-pot") if bench in ("gsm8k", "svamp") else ("sc-cot",):
            _eval(env, bench, split, method, pool, store)
    out = tmp_path / "trial"
    done = subprocess.run([sys.executable, str(SCRIPT), "--store", str(store), "--pool", str(pool), "--limit", "2",
                           "--folds", "2", "--out", str(out), "--draws", str(tmp_path / "d.jsonl")], env=env,
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cross-validated (2 folds" in done.stderr
    for kind in ("number", "choice"):
        data = json.loads((out / f"{kind}-budget.json").read_text())
        policy = policy_from_json(data, kind)
        assert data["format"] == "lemon-stop-policy/2" and policy.name == f"{kind}-budget"
        assert policy.opening in ("prose", "program") and data["trained_on"]["judged_pairs"] == {"number": 600,
                                                                                                 "choice": 240}
    assert len((tmp_path / "d.jsonl").read_text().splitlines()) == 8  # 2 items x 4 splits, seed 0


def test_a_bad_share_or_folder_is_one_line_before_any_work(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for args, fault in ((["--share", "1.5"], "--share 1.5"), (["--out", str(blocker / "x")], "cannot create")):
        done = subprocess.run([sys.executable, str(SCRIPT), *args, "--store", str(tmp_path / "none.sqlite")],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert fault in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "none.sqlite").exists()
