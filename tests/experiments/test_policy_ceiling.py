"""experiments/policy_ceiling.py: the ceiling of a pre-run team choice against the default (issue 55). Synthetic
outcomes, so each rule's arithmetic is checked against values worked out by hand."""

from __future__ import annotations

from tests.experiments import load_script

load_script("stop_rules_table")  # the scripts it imports, as Python finds them beside it
load_script("learn_stop_rule")
ceiling = load_script("policy_ceiling")

from lemon.spec.stops.policy import Reply  # noqa: E402
from lemon.train.stop_learning import Draw, ItemDraws, Outcome  # noqa: E402


def _item(key: str, chars: int = 100) -> ItemDraws:
    draw = Draw(Reply(False, "1", -5.0, 10, False), True, 20)
    return ItemDraws(key, "choice", chars, (draw,), ())


def test_the_oracle_takes_the_cheapest_team_that_reaches_the_items_best() -> None:
    items = [_item("aqua/dev/1@0"), _item("aqua/dev/2@0")]
    table = {"cot (1 voter)": {"aqua/dev/1@0": Outcome(1.0, 300, 1), "aqua/dev/2@0": Outcome(0.0, 300, 1)},
             "agree 2 of 3": {"aqua/dev/1@0": Outcome(1.0, 700, 2), "aqua/dev/2@0": Outcome(0.5, 800, 3)},
             "5-vote": {"aqua/dev/1@0": Outcome(1.0, 1500, 5), "aqua/dev/2@0": Outcome(0.5, 1500, 5)}}
    assert ceiling.oracle(table, items) == {"aqua/dev/1@0": "cot (1 voter)", "aqua/dev/2@0": "agree 2 of 3"}


def test_benchmarks_weigh_equally_and_code_enters_as_the_default() -> None:
    items = [_item("aqua/dev/1@0"), _item("mmlu/dev/1@0"), _item("mmlu/dev/2@0")]
    table = {"agree 2 of 3": {"aqua/dev/1@0": Outcome(1.0, 600, 2), "mmlu/dev/1@0": Outcome(0.0, 1000, 3),
                              "mmlu/dev/2@0": Outcome(0.0, 1000, 3)}}
    acc, tokens = ceiling.summarize(ceiling.default_choice(items), table, items, 0.0)
    assert acc == (100.0 + 0.0 + ceiling.CODE[0]) / 3  # aqua's one item weighs as much as mmlu's two
    assert tokens == (600 + 1000 + ceiling.CODE[1]) / 3
    _, paid = ceiling.summarize(ceiling.default_choice(items), table, items, 72.0)
    assert paid > tokens  # a policy pays for its prompt and its spec


def test_the_chooser_never_reads_the_items_own_outcome() -> None:
    """Ten items of one benchmark and length: on the other folds the cheap team is as right as the dear one, so
    the chooser picks it for every item, even the one item where only the dear team is right (an oracle would
    not)."""
    keys = [f"aqua/dev/{i}@0" for i in range(10)]
    items = [_item(k) for k in keys]
    cheap = {k: Outcome(1.0, 300, 1) for k in keys} | {keys[3]: Outcome(0.0, 300, 1)}
    dear = {k: Outcome(1.0, 1500, 5) for k in keys}
    chosen = ceiling.chooser({"cot (1 voter)": cheap, "5-vote": dear}, items, folds=5, price=0.05)
    assert chosen[keys[3]] == "cot (1 voter)"
    assert ceiling.oracle({"cot (1 voter)": cheap, "5-vote": dear}, items)[keys[3]] == "5-vote"


def test_a_size_out_of_range_is_one_line_and_exit_2() -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[2] / "experiments" / "policy_ceiling.py"
    for bad in (["--folds", "0"], ["--orders", "0"], ["--choice-items", "-1"], ["--price", "-0.1"]):
        done = subprocess.run([sys.executable, str(script), *bad], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert bad[0] in done.stderr
