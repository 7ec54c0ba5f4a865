"""experiments/stop_rule_seeds.py: the judged rules per seed and their paired tests beside every baseline, on
synthetic curves whose per-seed accuracies and discordant pairs are set by construction."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.experiments import load_script

curves = load_script("stop_curves")
load_script("learn_stop_rule")
load_script("judge_stop_rule")
seeds = load_script("stop_rule_seeds")


def curve(right: dict[int, int], tokens: int, n: int = 10) -> object:
    """n items on each seed of `right`, the first right[seed] of them right."""
    keys = [(("b", str(i), s), i < r) for s, r in right.items() for i in range(n)]
    return curves.Curve({k: ok for k, ok in keys}, {k: tokens for k, _ in keys}, {k: 1 for k, _ in keys})


def test_per_seed_is_each_seeds_accuracy_and_their_mean_and_sample_std() -> None:
    # the sample std, as `lemon report` gives it: |60 - 80| / sqrt(2)
    assert seeds.per_seed(curve({0: 6, 1: 8}, 100)) == "seed 0 60.0 %, seed 1 80.0 %; 70.0 ± 14.1 %"


def test_each_rule_is_tested_against_the_5_vote_and_the_best_point_within_its_tokens() -> None:
    fams = {curves.COT_SC: [("k=5", curve({0: 5, 1: 5}, 1000))],
            "esc (agree k of 5)": [("k=2", curve({0: 4, 1: 4}, 500)), ("k=3", curve({0: 5, 1: 5}, 900))]}
    out = seeds.lines(fams, {"learned": curve({0: 8, 1: 8}, 520)})
    assert "| learned | as committed | seed 0 80.0 %, seed 1 80.0 %; 80.0 ± 0.0 % | 520 | 20 |" in out
    assert "learned against the 5-vote: 6/0, p = 0.031" in out
    assert "learned against esc (agree k of 5) k=2 (40.0 % at 500): 8/0, p = 0.0078" in out  # 900 > 520 x 1.05
    cheap = seeds.lines(fams, {"cheap": curve({0: 8, 1: 8}, 100)})
    assert "cheap against esc (agree k of 5): no point at or below its tokens x 1.05" in cheap


def test_a_missing_store_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.argv", ["stop_rule_seeds.py", "--store", str(tmp_path / "none.sqlite")])
    with pytest.raises(SystemExit) as stop:
        seeds.run_script(seeds.main)
    assert stop.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: no results store at {tmp_path / 'none.sqlite'}")
