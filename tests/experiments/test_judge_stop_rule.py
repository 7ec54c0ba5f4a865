"""experiments/judge_stop_rule.py: the registered comparison of the learned stop rule (issue 54). The verdicts'
definitions on synthetic curves (each boundary on both sides), then the script end to end on a bank that `lemon
eval` builds on the scripted test-double pool: INCOMPLETE with its numbers withheld, shown on request."""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.experiments import load_script, scripted_bank

curves = load_script("stop_curves")  # the scripts judge_stop_rule imports, as Python finds them beside it
load_script("learn_stop_rule")
judge = load_script("judge_stop_rule")
ROOT = Path(__file__).parents[2]
N = 100


def curve(right: int, tokens: int, wrong_first: int = 0) -> object:
    """N pairs, `right` of them right: pairs wrong_first..wrong_first+right-1 (so two curves' overlap is set)."""
    keys = [("b", str(i), 0) for i in range(N)]
    return curves.Curve({k: wrong_first <= i < wrong_first + right for i, k in enumerate(keys)},
                        dict.fromkeys(keys, tokens), dict.fromkeys(keys, 1))


def fams(esc: list[tuple[str, object]], gate: list[tuple[str, object]], five: object | None = None) -> dict:
    return {curves.COT_SC: [("k=1", curve(60, 300)), ("k=5", five or curve(80, 1000))],
            judge.ESC: esc, judge.GATE: gate}


def outcomes(found: list) -> list[str]:
    return [v.outcome for v in found]


def test_a_pass_at_both_boundaries_and_a_fail_just_past_each() -> None:
    weak = [("k=2", curve(55, 380))]  # every pair it gets right the learned rule gets right too
    learned = curve(79, 400)  # 1.0 point below the 5-vote's 80 %, at exactly 40 % of its 1,000 tokens
    found = judge.verdicts(fams(weak, weak), learned, N)
    assert outcomes(found) == ["PASS", "PASS", "PASS", "PASS"]
    assert "-1.0 points at 40.0 % of its tokens" in found[0].detail
    assert "24 wins / 0 losses of 100 pairs" in found[2].detail
    assert judge.verdicts(fams(weak, weak), curve(78, 400), N)[0].outcome == "FAIL"  # 2 points below
    assert judge.verdicts(fams(weak, weak), curve(79, 401), N)[0].outcome == "FAIL"  # 40.1 % of the tokens


def test_equal_tokens_is_the_best_point_within_5_percent_else_the_cheapest_flagged() -> None:
    learned = curve(79, 400)
    inside = ("k=3", curve(79, 420))  # 400 x 1.05: allowed, as accurate: no win, no loss
    outside = ("k=4", curve(90, 421))  # more accurate but just past the budget: never the point compared
    found = judge.verdicts(fams([("k=2", curve(55, 380)), inside, outside], [("t=-5", curve(55, 300))]), learned, N)
    esc = next(v for v in found if v.name.endswith("esc at equal tokens"))
    assert "esc k=3 79.0 %" in esc.detail and esc.outcome == "FAIL"  # 0/0, p = 1
    assert found[1].outcome == "FAIL"  # (b) needs both
    dear = [("t=-5", curve(50, 900)), ("t=-10", curve(50, 800))]
    gate = next(v for v in judge.verdicts(fams([inside], dear), learned, N) if v.name.endswith("gate at equal tokens"))
    assert "FLAGGED" in gate.detail and "t=-10" in gate.detail and gate.outcome == "PASS"


def test_significant_but_behind_fails_and_ahead_but_not_significant_fails() -> None:
    learned = curve(60, 400)
    behind = [("k=2", curve(80, 380, wrong_first=0))]  # 20 losses, 0 wins: p tiny, wrong way
    assert judge._ahead("esc", behind, learned).outcome == "FAIL"
    few = [("k=2", curve(56, 380))]  # 4 wins, 0 losses: p = 0.125
    v = judge._ahead("esc", few, learned)
    assert v.outcome == "FAIL" and "4 wins / 0 losses" in v.detail and "p = 0.12" in v.detail
    more = [("k=2", curve(54, 380))]  # 6 wins, 0 losses: p = 0.031, not below 0.05 / 2 (two rules are judged)
    assert judge._ahead("esc", more, learned).outcome == "FAIL"
    most = [("k=2", curve(53, 380))]  # 7 wins, 0 losses: p = 0.016
    assert judge._ahead("esc", most, learned).outcome == "PASS"


def test_fewer_pairs_than_the_design_is_incomplete_and_shows_no_number_unasked() -> None:
    weak = [("k=2", curve(55, 380))]
    found = judge.verdicts(fams(weak, weak), curve(79, 400), N + 1)
    assert outcomes(found) == ["INCOMPLETE", "INCOMPLETE"]
    assert found[0].line(False).endswith(": INCOMPLETE") and "100 of 101 pairs" in found[0].line(True)
    assert judge.DESIGNS["test"].required == 840 and judge.DESIGNS["train"].required == 100


def _export(cache_db: Path, out: Path) -> None:
    """A LEMON cache export of `cache_db`'s completions (what `lemon cache export` writes), gzipped."""
    import json
    import sqlite3

    rows = sqlite3.connect(cache_db).execute("SELECT key, model, text, prompt_tokens, completion_tokens "
                                             "FROM completions").fetchall()
    lines = [json.dumps({"format": "lemon-llm-cache/1", "completions": len(rows), "scores": 0})]
    lines += [json.dumps({"completion": list(r)}) for r in rows]
    out.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))


def test_the_script_judges_a_bank_and_withholds_partial_numbers(tmp_path: Path, data_dir: Path) -> None:
    def export(method: str) -> None:  # the prose draws and their scores are "older": banked before generations
        if method == "cges":  # carried their log-probabilities
            _export(next((tmp_path / "home").rglob("llm-cache.sqlite")), tmp_path / "before.jsonl.gz")

    pool, store, env = scripted_bank(tmp_path, data_dir, export)
    args = [sys.executable, str(ROOT / "experiments" / "judge_stop_rule.py"), "--split", "train", "--store",
            str(store), "--pool", str(pool), "--drawn-before", str(tmp_path / "before.jsonl.gz")]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Pairs counted: 2 of 100 (gsm8k 0, svamp 2, multiarith 0, aqua 0, mmlu 0)" in out.stdout
    assert out.stdout.count(": INCOMPLETE\n") == 4 and "Numbers withheld" in out.stdout  # (a), (b) of each rule
    assert "|" not in out.stdout and " % at " not in out.stdout and "pairs counted)" not in out.stdout  # no number
    shown = subprocess.run([*args, "--show-partial"], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr[-2000:]
    for row in ("| learned (packaged policy, run) | as committed |", "| learned (fit on train at a price, replayed) |"
                " price=0.05 |", "| CoT-SC (k-vote) | k=5 |", "| esc (agree k of 5) | k=2 |", "### svamp",
                "| learned, budget (trial policy, run) | as committed |"):
        assert row in shown.stdout
    assert "2 of 100 pairs counted" in shown.stdout
    assert "Executor's answer and tokens on 2 of 2 pairs, the trial policy (its own opening) on 2 of 2" in shown.stdout
    assert ("sc-cot 0 from the generation, 10 only a banked teacher-forced score, 0 none, "
            "sc-pot 0 from the generation, 0 only a banked teacher-forced score, 10 none") in shown.stdout
    missing = subprocess.run([*args[:5], str(tmp_path / "none.sqlite"), *args[6:]], env=env, capture_output=True,
                             text=True, timeout=300, cwd=ROOT)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no results store" in missing.stderr


def test_a_trial_file_that_is_not_the_registered_one_voids_its_verdicts(monkeypatch) -> None:
    """The second rule is pinned by its files' content: the committed files are the registered ones, and any
    change (here: a registered digest that no longer matches) turns its verdicts VOID, never PASS or FAIL."""
    weak = [("k=2", curve(55, 380))]
    judged = judge.Judged(fams(weak, weak), curve(79, 400), curve(79, 400), set(), Counter(), (0, 0), (0, 0),
                          Counter())
    assert judge.unregistered_trial_files() == []
    assert outcomes(judge.trial_verdicts(judged, N)) == ["PASS", "PASS", "PASS", "PASS"]
    monkeypatch.setitem(judge.REGISTERED_TRIAL, "number-budget", "0" * 64)
    void = judge.trial_verdicts(judged, N)
    assert outcomes(void) == ["VOID"] * 4 and "number-budget not the file registered" in void[0].detail
