"""experiments/stop_curves.py: every stop rule's accuracy-tokens curve, matched at a token budget, replayed offline
from a sample bank (here one that `lemon eval` builds on the scripted test-double pool)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.experiments import load_script, scripted_bank

curves = load_script("stop_curves")
ROOT = Path(__file__).parents[2]


def curve(right: list[bool], tokens: list[int]) -> object:
    keys = [("b", str(i), 0) for i in range(len(right))]
    return curves.Curve(dict(zip(keys, right, strict=True)), dict(zip(keys, tokens, strict=True)),
                        dict.fromkeys(keys, 1))


def test_the_frontier_drops_a_threshold_a_cheaper_one_beats() -> None:
    points = [(300.0, 70.0), (500.0, 65.0), (700.0, 80.0), (700.0, 75.0), (900.0, 80.0)]
    assert curves.frontier(points) == [(300.0, 70.0), (700.0, 80.0)]


@pytest.mark.parametrize(("budget", "expected"), [
    (200.0, None),  # below the cheapest point: the rule cannot be run that cheaply
    (300.0, 70.0),
    (500.0, 75.0),  # halfway between 300 (70 %) and 700 (80 %): the 500-token point (65 %) is beaten
    (700.0, 80.0),
    (5000.0, 80.0),  # past the dearest frontier point: the rule need not spend the budget
])
def test_accuracy_at_matched_tokens_is_interpolated_on_the_frontier(budget: float, expected: float | None) -> None:
    points = [(300.0, 70.0), (500.0, 65.0), (700.0, 80.0), (900.0, 80.0)]
    got = curves.interpolated(points, budget)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_the_best_point_at_or_below_a_budget_and_the_paired_test() -> None:
    cheap = curve([True, False, True, False], [100, 100, 100, 100])
    dear = curve([True, True, True, False], [300, 300, 300, 300])
    same = curve([True, True, True, False], [200, 200, 200, 200])
    points = [("a", cheap), ("b", dear), ("c", same)]
    assert curves.best_at_or_below(points, 250) == ("c", same)
    assert curves.best_at_or_below(points, 400) == ("c", same)  # as accurate as b and cheaper
    assert curves.best_at_or_below(points, 50) is None
    assert curves.paired(dear, cheap) == "1/0, p = 1"


def test_every_rule_of_the_sweep_is_a_valid_team() -> None:
    from lemon.spec.roles import RoleLibrary
    from lemon.spec.validate import validate_spec
    from tests.pools import LEVELS

    rules = curves.rules()
    assert {r.family for r in rules} >= {curves.COT_SC, curves.CROSS_CHECK, "cges (posterior >= c)"}
    assert len({r.label for r in rules}) == len(rules)
    for rule in rules:
        validate_spec(rule.team("number", "large"), RoleLibrary.load(), LEVELS)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_curves_replay_a_bank_offline_and_only_read_the_store(tmp_path: Path, data_dir: Path) -> None:
    pool, store, env = scripted_bank(tmp_path, data_dir)
    before = _digest(store)
    args = [sys.executable, str(ROOT / "experiments" / "stop_curves.py"), "--store", str(store), "--benchmarks",
            "svamp", "--limit", "2", "--pool", str(pool), "--budget", "100"]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "svamp 2 pairs" in out.stdout and "At 100 worker tokens per item" in out.stdout
    for row in ("| CoT-SC (k-vote) | k=5 |", "| cges (posterior >= c) | c=0.99 |", "| program cross-check | CPCCC |",
                "| gate (logprob >= t, agree 2) | t=-30 |", "| esc (agree k of 5) | k=2 |"):
        assert row in out.stdout
    assert _digest(store) == before  # read only
    missing = subprocess.run([*args[:3], str(tmp_path / "none.sqlite"), *args[4:]], env=env, capture_output=True,
                             text=True, timeout=300, cwd=ROOT)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no results store" in missing.stderr
