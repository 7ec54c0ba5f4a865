"""experiments/weighted_vote.py: the confidence-weighted vote (CISC) over the 5-vote's replies."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from lemon.runtime import majority_vote
from tests.experiments import load_script

weighted = load_script("weighted_vote")
KEYS = st.lists(st.sampled_from(["12", "13", "7", None]), min_size=1, max_size=7)
SCORES = st.floats(-2_000, 0, allow_nan=False)


@given(KEYS.flatmap(lambda keys: st.tuples(st.just(keys), st.lists(SCORES, min_size=len(keys),
                                                                     max_size=len(keys)))))
def test_an_infinite_temperature_is_the_runtimes_plain_vote(keys_scores: tuple[list, list]) -> None:
    """The invariant the study rests on: with every weight 1 the rule picks the very reply `majority_vote` picks
    (ties to the earliest reply), whatever the scores."""
    keys, scores = keys_scores
    texts = [f"reply {i}: {k}" for i, k in enumerate(keys)]
    by_text = dict(zip(texts, keys, strict=True))
    assert texts[weighted.weighted_vote(keys, scores, math.inf)] == majority_vote(texts, by_text.get)


@given(KEYS.filter(lambda keys: any(keys)), st.data())
def test_a_cold_temperature_takes_the_surest_reply(keys: list, data: st.DataObject) -> None:
    """T -> 0: the answer of the surest reply with an answer wins, however many replies outvote it."""
    scores = [float(s) for s in data.draw(st.lists(st.integers(-2_000, 0), min_size=len(keys), max_size=len(keys),
                                                   unique=True))]  # a nat apart at least: exp(-1e9) is 0
    surest = max((i for i, k in enumerate(keys) if k), key=lambda i: scores[i])
    assert keys[weighted.weighted_vote(keys, scores, 1e-9)] == keys[surest]


def test_a_sure_reply_outweighs_two_unsure_ones_only_when_the_temperature_says_so() -> None:
    keys, scores = ["12", "13", "13"], [-20.0, -60.0, -61.0]
    assert weighted.weighted_vote(keys, scores, math.inf) == 1  # two against one
    assert weighted.weighted_vote(keys, scores, 100.0) == 1  # exp(-0.4) + exp(-0.41) > 1
    assert weighted.weighted_vote(keys, scores, 10.0) == 0  # 2 * exp(-4) < 1
    assert weighted.weighted_vote([None, None], [-1.0, -2.0], 1.0) == 0  # no answer: the first reply, as the runtime


def test_the_mean_signal_divides_by_the_completion_tokens() -> None:
    voter = weighted.Voter(key="3", right=True, score=-30.0, tokens=60)
    assert voter.signal("sum") == -30.0 and voter.signal("mean") == -0.5
    assert weighted.Voter(key=None, right=False, score=-4.0, tokens=0).signal("mean") == -4.0


def test_the_within_item_auroc_compares_replies_of_one_item_only() -> None:
    """Item A's replies all score far above item B's; within each item the right one is surer in A and less sure in
    B: 0.5, where an AUROC over all replies would read 0.75."""
    def voter(right: bool, score: float) -> object:
        return weighted.Voter(key="1", right=right, score=score, tokens=10)

    pairs = [[voter(True, -5.0), voter(False, -9.0)], [voter(True, -90.0), voter(False, -80.0)],
             [voter(True, -1.0), voter(True, -2.0)]]  # no wrong reply: not counted
    assert weighted.within_item_auroc(pairs, "sum") == 0.5
    assert weighted.within_item_auroc(pairs[2:], "sum") != weighted.within_item_auroc(pairs[2:], "sum")  # nan
