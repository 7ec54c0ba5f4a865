"""The learned stop rule's learner (`lemon.train.stop_learning`) and its decision (`lemon.runtime.learned_stop`).

A synthetic bank stands in for the sample bank here (a test double of the data, not of the code): each item's
first prose voter is right exactly when its reply's log-probability per token is high, and later voters are
right half the time. A learner that learns must find that signal, stop early on sure first replies and keep
voting on unsure ones; with training switched off (all weights zero) no threshold can tell the two apart."""

from __future__ import annotations

import json
import random

import pytest

from lemon.errors import ConfigError
from lemon.spec.stops.policy import FEATURES, Moment, Reply, StopPolicy, load_policy, policy_from_json
from lemon.train.stop_learning import (
    Draw,
    ItemDraws,
    Objective,
    Point,
    allocate,
    choose_thresholds,
    evaluate,
    fold_split,
    frontier,
    learn_policy,
    learn_weights,
    pareto,
    reward,
)


def _bank(n: int, seed: int) -> list[ItemDraws]:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        sure = rng.random() < 0.5
        first = Draw(Reply(False, "7" if sure else str(rng.randint(10, 99)), -5.0 if sure else -90.0, 100, False),
                     sure, 300)
        rest = tuple(Draw(Reply(False, "7" if rng.random() < 0.6 else str(rng.randint(10, 99)), -60.0, 100, False),
                          False, 300) for _ in range(4))
        # "7" is the right answer of every item: a later voter saying 7 is right too
        rest = tuple(Draw(d.reply, d.reply.answer == "7", d.tokens) for d in rest)
        items.append(ItemDraws(f"syn/{i}@0", "number", 200, (first, *rest), ()))
    return items


def test_learning_finds_the_signal_and_fails_when_switched_off() -> None:
    train, test = _bank(80, 0), _bank(80, 1)
    learned = learn_policy("t", train, orders=1, objective=Objective(0.05))
    untrained = choose_thresholds("t", tuple(0.0 for _ in FEATURES), train, 1, Objective(0.05))  # training off
    got, off = (evaluate(lambda m, p=p: p.decide(m)[0], test, 1) for p in (learned, untrained))
    assert reward(got, 0.05) > reward(off, 0.05) + 0.02
    # on held-out items: no less accurate, at well under the tokens (untrained, no threshold separates the
    # sure first replies from the unsure ones, so the best it can do is vote every time)
    accuracy = [sum(o.right for o in x.values()) / len(x) for x in (got, off)]
    tokens = [sum(o.tokens for o in x.values()) / len(x) for x in (got, off)]
    assert accuracy[0] >= accuracy[1] - 0.01 and tokens[0] < 0.6 * tokens[1]
    # and it does so by stopping on a sure first reply and voting on an unsure one
    sure = Moment((Reply(False, "7", -5.0, 100, False),), 4, 0, 200)
    unsure = Moment((Reply(False, "42", -90.0, 100, False),), 4, 0, 200)
    assert learned.decide(sure)[0] == "stop" and learned.decide(unsure)[0] == "prose"


def test_decisions_are_exactly_reproducible_from_the_file(tmp_path) -> None:
    policy = learn_policy("t", _bank(40, 2), orders=2, objective=Objective(0.05))
    path = tmp_path / "p.json"
    path.write_text(json.dumps(policy.to_json()))
    again = load_policy(path)
    moments = [Moment(tuple(d.reply for d in item.prose[:k]), 5 - k, 0, 200)
               for item in _bank(20, 3) for k in range(1, 5)]
    assert all(abs(again.probability(m) - policy.probability(m)) < 1e-5 for m in moments)
    assert [again.decide(m)[0] for m in moments] == [policy.decide(m)[0] for m in moments]


def test_verify_runs_a_program_when_unsure_and_programs_are_left() -> None:
    policy = StopPolicy("t", tuple(0.0 for _ in FEATURES), stop_at=0.9, verify_at=0.4)  # p = 0.5 everywhere
    m = Moment((Reply(False, "3", None, 50, False),), 4, 5, 100)
    assert policy.decide(m)[0] == "verify"
    assert policy.decide(Moment(m.replies, 4, 0, 100))[0] == "prose"
    assert policy.decide(Moment(m.replies, 0, 0, 100))[0] == "stop"


@pytest.mark.parametrize(("change", "fault"), [
    ({"format": "x"}, "not a LEMON stop policy"),
    ({"features": ["bias"]}, "features are not this version's"),
    ({"weights": [1.0]}, "weights must be"),
    ({"weights": ["NaN"] * len(FEATURES)}, "weights must be"),
    ({"weights": [1e308] * len(FEATURES)}, "weights must be"),
    ({"stop_at": 0.3, "verify_at": 0.5}, "verify_at <= stop_at"),
    ({"stop_at": True}, "stop_at and verify_at"),
    ({"name": ""}, "name must be"),
])
def test_a_hostile_policy_file_is_one_line(tmp_path, change: dict, fault: str) -> None:
    data = StopPolicy("t", tuple(0.0 for _ in FEATURES), 0.9, 0.5).to_json() | change
    with pytest.raises(ConfigError) as err:
        policy_from_json(data, "p.json")
    assert fault in str(err.value) and "\n" not in str(err.value)
    big = tmp_path / "big.json"
    big.write_text(" " * 100_000)
    with pytest.raises(ConfigError, match="larger than"):
        load_policy(big)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="not JSON"):
        load_policy(tmp_path / "bad.json")


def _two_kind_bank(n: int, seed: int) -> list[ItemDraws]:
    """Prose voters right 60 % of the time at 300 tokens, program voters 80 % at 150 (the bank's shape on number
    benchmarks: a program voter is the cheaper and the surer); "7" is every item's right answer."""
    rng = random.Random(seed)

    def draw(program: bool, p_right: float, tokens: int) -> Draw:
        right = rng.random() < p_right
        return Draw(Reply(program, "7" if right else str(rng.randint(10, 99)), -30.0, tokens // 2, False), right,
                    tokens)
    return [ItemDraws(f"syn/{i}@0", "number", 200, tuple(draw(False, 0.6, 300) for _ in range(5)),
                      tuple(draw(True, 0.8, 150) for _ in range(5))) for i in range(n)]


def _mean(outcomes: dict, field: str) -> float:
    return sum(getattr(o, field) for o in outcomes.values()) / len(outcomes)


def test_a_budget_is_met_and_learning_under_it_pays_only_when_switched_on() -> None:
    train, test = _two_kind_bank(60, 4), _two_kind_bank(60, 5)
    cap = Objective(cap=0.3 * 1500)  # 30 % of the 5-vote's 1,500 tokens: 3 program voters or 1 prose one
    learned = learn_policy("t", train, orders=2, objective=cap, opening="program")
    untrained = choose_thresholds("t", tuple(0.0 for _ in FEATURES), train, 2, cap, "program")  # training off
    fit = evaluate(lambda m: learned.decide(m)[0], train, 2, "program")
    assert _mean(fit, "tokens") <= cap.cap  # type: ignore[operator]
    got, off = (evaluate(lambda m, p=p: p.decide(m)[0], test, 2, "program") for p in (learned, untrained))
    assert _mean(got, "right") > _mean(off, "right") + 0.05 and _mean(got, "tokens") <= 1.1 * cap.cap  # type: ignore
    # opened with a prose voter, the same budget buys one prose reply (60 %), not a check between programs
    prose_first = learn_policy("t", train, orders=2, objective=cap)
    assert _mean(evaluate(lambda m: prose_first.decide(m)[0], test, 2), "right") < _mean(got, "right") - 0.1


def test_a_budget_nothing_fits_takes_the_cheapest_and_a_program_opening_needs_programs() -> None:
    items = _two_kind_bank(10, 6)
    policy = choose_thresholds("t", tuple(0.0 for _ in FEATURES), items, 1, Objective(cap=10.0))
    assert _mean(evaluate(lambda m: policy.decide(m)[0], items, 1), "voters") == 1.0  # none fits: one voter
    no_programs = [ItemDraws(d.key, "choice", d.task_chars, d.prose, ()) for d in items]
    ran = evaluate(lambda m: "stop", no_programs, 1, "program")
    assert _mean(ran, "tokens") == 300  # a program opening without program voters opens with a prose one


@pytest.mark.parametrize(("change", "fault"), [
    ({"opening": "both"}, "opening must be one of prose, program"),
    ({"agree": 1}, "agree must be null or a whole number"),
    ({"agree": True}, "agree must be null or a whole number"),
    ({"agree": 2.5}, "agree must be null or a whole number"),
    ({"format": "lemon-stop-policy/1"}, "are format 2's"),
])
def test_a_hostile_format_2_field_is_one_line(change: dict, fault: str) -> None:
    data = StopPolicy("t", tuple(0.0 for _ in FEATURES), 0.9, 0.5, "program", 2).to_json() | change
    with pytest.raises(ConfigError) as err:
        policy_from_json(data, "p.json")
    assert fault in str(err.value) and "\n" not in str(err.value)


def test_format_1_files_stay_format_1_and_a_floor_stops_whatever_the_probability() -> None:
    plain = StopPolicy("t", tuple(0.0 for _ in FEATURES), 0.9, 0.5)
    assert plain.to_json()["format"] == "lemon-stop-policy/1" and "agree" not in plain.to_json()
    floor = StopPolicy("t", tuple(0.0 for _ in FEATURES), 0.9, 0.5, "prose", 2)  # p = 0.5 < stop_at
    assert policy_from_json(floor.to_json(), "p.json") == floor
    one, two = Reply(False, "3", None, 50, False), Reply(True, "3", None, 50, False)
    assert floor.decide(Moment((one,), 4, 4, 100))[0] == "verify"
    assert floor.decide(Moment((one, two), 4, 3, 100))[0] == "stop"
    assert plain.decide(Moment((one, two), 4, 3, 100))[0] == "verify"  # no floor: two votes are not enough


def _point(accuracy: float, tokens: float) -> Point:
    return Point(StopPolicy("t", tuple(0.0 for _ in FEATURES), 0.9, 0.5), accuracy, tokens)


def test_a_pooled_budget_goes_where_accuracy_is_cheap() -> None:
    cheap = [_point(0.5, 100), _point(0.9, 300), _point(0.85, 400)]  # the last is beaten: off the frontier
    dear = [_point(0.5, 100), _point(0.55, 300)]
    assert pareto(cheap) == cheap[:2]
    pairs = {"cheap": 1, "dear": 1}
    got = allocate({"cheap": cheap, "dear": dear}, pairs, cap=200)
    assert (got["cheap"].tokens, got["dear"].tokens) == (300, 100)  # 70 % at 200, not 52.5 %
    weighted = allocate({"cheap": cheap, "dear": dear}, {"cheap": 1, "dear": 3}, cap=150)
    assert (weighted["cheap"].tokens, weighted["dear"].tokens) == (300, 100)  # (300 + 3 x 100) / 4 = 150
    nothing = allocate({"cheap": cheap, "dear": dear}, pairs, cap=10)
    assert (nothing["cheap"].tokens, nothing["dear"].tokens) == (100, 100)  # none fits: the cheapest


def test_a_pooled_budget_pays_only_when_learning_is_switched_on() -> None:
    """Two kinds under one budget (the two synthetic banks above): the points of learned weights, allocated,
    beat those of zero weights on held-out items at the same pooled tokens."""
    def fronts(banks: dict[str, list[ItemDraws]], learned: bool) -> dict[str, list[Point]]:
        out: dict[str, list[Point]] = {}
        for kind, items in banks.items():
            opening = "program" if items[0].programs else "prose"
            off = tuple(0.0 for _ in FEATURES)
            weights = learn_weights(items, 2, opening=opening, program_logprobs=False) if learned else off
            out[kind] = [Point(p, _mean(o, "right"), _mean(o, "tokens")) for p, o in
                         frontier(kind, weights, items, 2, lowest_stop_at=0.3, opening=opening, agree=2)]
        return out

    train = {"number": _two_kind_bank(40, 7), "choice": _bank(40, 8)}
    test = {"number": _two_kind_bank(40, 9), "choice": _bank(40, 10)}
    pairs, cap = {"number": 1, "choice": 1}, 500.0
    results = []
    for learned in (True, False):
        chosen = allocate(fronts(train, learned), pairs, cap)
        outcomes = {k: evaluate(lambda m, p=chosen[k].policy: p.decide(m)[0], test[k], 2,
                                chosen[k].policy.opening or "prose") for k in test}
        results.append((sum(_mean(o, "right") for o in outcomes.values()) / 2,
                        sum(_mean(o, "tokens") for o in outcomes.values()) / 2))
    (on_right, on_tokens), (off_right, _) = results
    assert on_right > off_right + 0.05 and on_tokens <= 1.15 * cap


def test_a_format_2_policy_reads_prose_log_probabilities_only() -> None:
    """Its training banks hold program replies without a log-probability, so on new draws (which carry one) it
    must see what it was fit on: a program reply's log-probability changes nothing for format 2, and does for 1."""
    weights = tuple(1.0 if f in ("leader_mean_logprob", "logprob_known") else 0.0 for f in FEATURES)
    known, unknown = (Moment((Reply(True, "7", lp, 50, False),), 5, 4, 100) for lp in (-5.0, None))
    two = StopPolicy("t", weights, 0.9, 0.5, "program", 2)
    one = StopPolicy("t", weights, 0.9, 0.5)
    assert two.probability(known) == two.probability(unknown)
    assert one.probability(known) != one.probability(unknown)
    prose = Moment((Reply(False, "7", -5.0, 50, False),), 4, 5, 100)
    assert two.probability(prose) == one.probability(prose)  # a prose reply's is read by both


def test_every_grid_point_is_what_its_policy_does_when_run() -> None:
    """`frontier`'s outcomes are those of the policies it yields (decided as at run time), in both formats, on
    draws whose program replies carry a log-probability (which format 2 does not read)."""
    items = _two_kind_bank(12, 11)
    weights = tuple(0.5 if f in ("leader_mean_logprob", "logprob_known", "agree_2") else 0.0 for f in FEATURES)
    for opening in (None, "program"):
        for policy, outcomes in list(frontier("t", weights, items, 2, lowest_stop_at=0.3, opening=opening))[::7]:
            assert evaluate(lambda m, p=policy: p.decide(m)[0], items, 2, opening or "prose") == outcomes


def test_cross_validation_folds_keep_an_items_seeds_together_and_partition_the_pairs() -> None:
    items = [ItemDraws(f"syn/{i}@{seed}", "number", 10, (), ()) for i in range(7) for seed in (0, 1)]
    held = [fold_split(items, 3, f)[1] for f in range(3)]
    assert sorted(d.key for part in held for d in part) == sorted(d.key for d in items)
    for f, part in enumerate(held):
        fit_on, _ = fold_split(items, 3, f)
        assert {d.key.split("@")[0] for d in part}.isdisjoint(d.key.split("@")[0] for d in fit_on)
