"""experiments/choose_default.py: the default's selection rule as written before the numbers (issue 55)."""

from __future__ import annotations

from tests.experiments import load_script

load_script("stop_rules_table")  # the scripts choose_default imports, as Python finds them beside it
load_script("learn_stop_rule")
choose = load_script("choose_default")


def test_the_most_accurate_wins_unless_a_cheaper_one_is_within_a_point() -> None:
    rows = {"dear": (84.2, 1816.0), "close": (83.3, 1033.0), "cheap": (79.6, 874.0)}
    assert choose.winner(rows) == "close"  # 0.9 points below, 43 % fewer tokens
    assert choose.winner({**rows, "close": (83.1, 1033.0)}) == "dear"  # 1.1 points below: accuracy first
    assert choose.winner({"a": (50.0, 900.0), "b": (50.0, 800.0)}) == "b"


def test_a_pool_that_cannot_score_shows_the_learned_rule_no_log_probability() -> None:
    from lemon.spec.stops.policy import Reply
    from lemon.train.stop_learning import Draw, ItemDraws

    draw = Draw(Reply(False, "7", -12.5, 40, False), True, 90)
    item = ItemDraws("gsm8k/train/0@0", "number", 120, (draw, draw), (Draw(Reply(True, "7", -3.0, 20, False),
                                                                            True, 60),))
    hidden = choose.without_scores(item)
    assert all(d.reply.logprob is None for d in (*hidden.prose, *hidden.programs))
    assert [(d.reply.answer, d.right, d.tokens) for d in hidden.prose] == [("7", True, 90)] * 2
