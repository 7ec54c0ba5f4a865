"""experiments/learn_stop_rule.py --score: prose replies banked without a log-probability (drawn before replies
carried one) are scored once and the score banked, so the learned rule reads the same signal on every draw. The
bank here is one `lemon eval` builds on the scripted test-double pool, whose generations carry no log-probability
(as the older `cpu` draws of AQuA and MMLU `dev` do)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.evaluation.test_cli import scripted_pool_yaml

ROOT = Path(__file__).parents[2]


def _logprobs(draws: Path) -> list[object]:
    """Every prose voter's log-probability in a draws file (the third field of each draw)."""
    return [voter[2] for line in draws.read_text().splitlines() for voter in json.loads(line)["prose"]]


def test_score_banks_a_log_probability_for_every_prose_reply_that_lacked_one(tmp_path: Path,
                                                                              data_dir: Path) -> None:
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", 0.0)
    store = tmp_path / "bank.sqlite"
    env = {**os.environ, "LEMON_HOME": str(tmp_path / "home"), "LEMON_DATA_DIR": str(data_dir), "COLUMNS": "200"}
    for method in ("sc-cot", "sc-pot"):
        done = subprocess.run([sys.executable, "-m", "lemon.cli.main", "eval", "svamp", "--method", method,
                               "--agents", "5", "--split", "train", "--limit", "2", "--seeds", "1", "--pool",
                               str(pool), "--level", "large", "--store", str(store)], env=env, capture_output=True,
                              text=True, timeout=300, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
    script = [sys.executable, str(ROOT / "experiments" / "learn_stop_rule.py"), "--store", str(store), "--pool",
              str(pool), "--splits", "svamp:train", "--collect-only"]
    plain = subprocess.run([*script, "--draws", str(tmp_path / "plain.jsonl")], env=env, capture_output=True,
                           text=True, timeout=300, cwd=ROOT)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert _logprobs(tmp_path / "plain.jsonl") == [None] * 10  # 2 items x 5 prose voters, none scored
    scored = subprocess.run([*script, "--score", "--draws", str(tmp_path / "scored.jsonl")], env=env,
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert scored.returncode == 0, scored.stderr[-2000:]
    values = _logprobs(tmp_path / "scored.jsonl")
    assert len(values) == 10 and all(isinstance(v, float) and v < 0 for v in values)
    again = subprocess.run([*script, "--draws", str(tmp_path / "again.jsonl")], env=env, capture_output=True,
                           text=True, timeout=300, cwd=ROOT)  # without --score: the scores are banked now
    assert again.returncode == 0 and _logprobs(tmp_path / "again.jsonl") == values, again.stderr[-2000:]


def test_an_output_folder_that_cannot_be_made_is_one_line_before_any_work(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for flag, value in (("--out", blocker / "policies"), ("--draws", blocker / "d.jsonl")):
        done = subprocess.run([sys.executable, str(ROOT / "experiments" / "learn_stop_rule.py"), flag, str(value),
                               "--store", str(tmp_path / "none.sqlite")], capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert "cannot create the folder" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "none.sqlite").exists()  # refused before the store was opened
