"""Learning a stop rule from the sample bank: a cost-sensitive classifier over run-time moments.

Why a classifier and not RL (RL-Guided Adaptive Sampling, arXiv 2606.03102, trains its controller with policy
gradients): the bank holds every draw of every training item (5 prose and 5 program voters per item and
seed), so the value of stopping at any moment is known exactly (is the leading answer right?) and any policy
can be replayed exactly over every draw order. What is left to learn is P(leader right | moment), a supervised
problem; the decision is two thresholds on it, chosen for expected accuracy minus a token price over draw
orders. That is a few dozen parameters fit on a few hundred items instead of a policy network's thousands, and
each step is checkable: the calibration on held-out items, then the thresholds' reward.

Shapes: a bank is a list of `ItemDraws` (one per item and seed; `prose` and `programs` hold the banked draws in
rank order); a moment's features are `len(FEATURES)` floats; `fit_probability` takes an (n, F) matrix.

A format-2 policy adds what the first form could not learn: its opening voter and an agreement floor. Each
(opening, floor) gets its own fit and grid (`frontier`), and `allocate` picks one point per answer kind for a
token budget pooled over the kinds, the form of the claim it is judged by.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

from lemon.spec.stops.policy import (
    FEATURES,
    Action,
    Moment,
    Opening,
    Reply,
    StopPolicy,
    features,
    prose_logprobs_only,
)


@dataclass(frozen=True, slots=True)
class Draw:
    """One banked voter: its reply as the rule sees it, whether its answer is right, and its tokens (prompt and
    completion, what the run pays)."""

    reply: Reply
    right: bool
    tokens: int


@dataclass(frozen=True, slots=True)
class ItemDraws:
    key: str  # "benchmark/split/item@seed"
    task_kind: str  # which policy learns from it: one per answer kind
    task_chars: int
    prose: tuple[Draw, ...]
    programs: tuple[Draw, ...]

    def right_answers(self) -> frozenset[str]:
        return frozenset(d.reply.answer for d in (*self.prose, *self.programs) if d.right and d.reply.answer)


@dataclass(frozen=True, slots=True)
class Outcome:
    right: float  # share of the draw orders whose final answer is right
    tokens: float  # mean tokens over the orders
    voters: float  # mean voters run


Orders = list[tuple[tuple[int, ...], tuple[int, ...]]]
#: Which voter a run opens with (`Opening`): a format-1 policy runs the team's first written voter; a format-2
#: policy names it. A program voter costs about half a prose one on these benchmarks.


def draw_orders(item: ItemDraws, n: int, seed: int = 0) -> Orders:
    """`n` orders of the item's banked draws (prose and program permuted independently), the first the rank
    order; the same for every policy compared on the item."""
    rng = random.Random(f"{seed}:{item.key}")
    orders = [(tuple(range(len(item.prose))), tuple(range(len(item.programs))))]
    while len(orders) < n:
        p, q = list(range(len(item.prose))), list(range(len(item.programs)))
        rng.shuffle(p)
        rng.shuffle(q)
        orders.append((tuple(p), tuple(q)))
    return orders


def fold_split(items: Sequence[ItemDraws], folds: int, fold: int) -> tuple[list[ItemDraws], list[ItemDraws]]:
    """(fit on, held out) of cross-validation by item: the items, an item's seeds together, dealt over `folds` in
    sorted order; `fold` is held out."""
    ids = sorted({d.key.split("@")[0] for d in items})
    fold_of = {item: i % folds for i, item in enumerate(ids)}
    held = [fold_of[d.key.split("@")[0]] == fold for d in items]
    return [d for d, h in zip(items, held, strict=True) if not h], [d for d, h in zip(items, held, strict=True) if h]


def moment(item: ItemDraws, ran: Sequence[Draw], prose_left: int, programs_left: int) -> Moment:
    return Moment(tuple(d.reply for d in ran), prose_left, programs_left, item.task_chars)


def play(decide: object, item: ItemDraws, order: tuple[tuple[int, ...], tuple[int, ...]],
         opening: Opening = "prose") -> tuple[bool, int, int]:
    """One run of a rule over one order of the draws: (right, tokens, voters). `decide(moment) -> action`; the
    opening voter always runs (there is nothing to decide on before it): a prose one, or a program one where
    `opening` says so and the item has one."""
    prose = [item.prose[i] for i in order[0]]
    programs = [item.programs[i] for i in order[1]]
    ran = [_open(prose, programs, opening)]
    while True:
        m = moment(item, ran, len(prose), len(programs))
        action: Action = decide(m)  # type: ignore[operator]
        if action == "stop" or not (prose or programs):
            break
        ran.append(programs.pop(0) if (action == "verify" and programs) or not prose else prose.pop(0))
    leader = moment(item, ran, 0, 0).leader()
    return leader is not None and leader in item.right_answers(), sum(d.tokens for d in ran), len(ran)


def _open(prose: list[Draw], programs: list[Draw], opening: Opening) -> Draw:
    """The opening voter, taken off its list."""
    return programs.pop(0) if opening == "program" and programs else prose.pop(0)


def evaluate(decide: object, items: Sequence[ItemDraws], orders: int,
             opening: Opening = "prose") -> dict[str, Outcome]:
    """Each item's outcome under `decide`, averaged over `orders` draw orders."""
    out = {}
    for item in items:
        runs = [play(decide, item, o, opening) for o in draw_orders(item, orders)]
        out[item.key] = Outcome(*(float(np.mean([r[i] for r in runs])) for i in range(3)))
    return out


def training_moments(items: Sequence[ItemDraws], orders: int, paths: int = 4, seed: int = 0,
                     opening: Opening = "prose",
                     program_logprobs: bool = True) -> Iterator[tuple[list[float], bool, float]]:
    """(features, leader right, weight) for every moment along `paths` random interleavings of prose and
    program voters in each of `orders` draw orders, each opened as `opening` says; each item weighs 1 in all
    (so long items don't dominate). Without `program_logprobs`, as a format-2 policy sees a moment."""
    seen = (lambda m: m) if program_logprobs else prose_logprobs_only
    rng = random.Random(seed)
    for item in items:
        rows: list[tuple[list[float], bool]] = []
        right = item.right_answers()
        for order in draw_orders(item, orders):
            for _ in range(paths):
                prose = [item.prose[i] for i in order[0]]
                programs = [item.programs[i] for i in order[1]]
                ran = [_open(prose, programs, opening)]
                while True:
                    m = moment(item, ran, len(prose), len(programs))
                    rows.append((features(seen(m)), m.leader() in right))
                    if not (prose or programs):
                        break
                    use_program = bool(programs) and (not prose or rng.random() < 0.5)
                    ran.append(programs.pop(0) if use_program else prose.pop(0))
        for x, y in rows:
            yield x, y, 1.0 / len(rows)


def fit_probability(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-3,
                    steps: int = 50) -> np.ndarray:
    """Weighted L2-regularised logistic regression by Newton's method: x (n, F), y (n,) in {0, 1}, w (n,)
    summing to the number of items; returns the F weights. The bias (column 0) is not penalised."""
    beta = np.zeros(x.shape[1])
    penalty = np.full(x.shape[1], l2 * w.sum())
    penalty[0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ beta, -50, 50)))
        grad = x.T @ (w * (p - y)) + penalty * beta
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + np.diag(penalty) + 1e-9 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        beta -= step
        if float(np.abs(step).max()) < 1e-8:
            break
    return beta


def learn_weights(items: Sequence[ItemDraws], orders: int, l2: float = 1e-3, opening: Opening = "prose",
                  program_logprobs: bool = True) -> tuple[float, ...]:
    """P(leader right | moment)'s weights; `program_logprobs` False for a format-2 policy (see `training_moments`)."""
    rows = list(training_moments(items, orders, opening=opening, program_logprobs=program_logprobs))
    x = np.array([r[0] for r in rows], dtype=np.float64)
    y = np.array([float(r[1]) for r in rows])
    w = np.array([r[2] for r in rows])
    assert x.shape[1] == len(FEATURES)
    return tuple(float(b) for b in fit_probability(x, y, w, l2))


def reward(outcomes: dict[str, Outcome], price: float) -> float:
    """Mean accuracy minus `price` per 1,000 tokens."""
    values = list(outcomes.values())
    return float(np.mean([o.right for o in values]) - price * np.mean([o.tokens for o in values]) / 1000)


@dataclass(frozen=True, slots=True)
class Objective:
    """What the thresholds are chosen for: expected accuracy minus `price` per 1,000 tokens; or, with `cap`, the
    most expected accuracy at mean tokens <= `cap` (if no threshold fits, the cheapest), the form of a claim
    made at a token budget ("the 5-vote's accuracy at 40 % of its tokens")."""

    price: float = 0.05
    cap: float | None = None

    def value(self, outcomes: dict[str, Outcome]) -> float:
        if self.cap is None:
            return reward(outcomes, self.price)
        tokens = float(np.mean([o.tokens for o in outcomes.values()]))
        return reward(outcomes, 0.0) if tokens <= self.cap else -1.0 - tokens / 1e6

    def lowest_stop_at(self) -> float:
        """The grid's lowest stop threshold: 0.50 for a price (the packaged policies' grid, so they rebuild the
        same); 0.30 under a cap, where a tight budget must stop on weaker evidence."""
        return 0.50 if self.cap is None else 0.30


@dataclass(frozen=True, slots=True)
class Point:
    """One policy of a threshold grid and what it does on the items it was chosen on (means over items)."""

    policy: StopPolicy
    accuracy: float
    tokens: float


def frontier(name: str, weights: tuple[float, ...], items: Sequence[ItemDraws], orders: int, *,
             lowest_stop_at: float = 0.50, opening: Opening | None = None,
             agree: int | None = None) -> Iterator[tuple[StopPolicy, dict[str, Outcome]]]:
    """Every (stop_at, verify_at) of the grid with its outcomes on `items` (runs opened as `opening` says, prose
    when None), stop_at from `lowest_stop_at` to 0.99 by 0.02, and 1.0 where a floor `agree` stops the run;
    never verifying is one of the choices (verify_at = stop_at)."""
    known: dict[Moment, float] = {}  # P(leader right) of each moment met: the weights are fixed over the grid
    scorer = StopPolicy(name, weights, 1.0, 1.0, opening, agree)  # its format: what it reads of a moment

    def probability(m: Moment) -> float:
        if m not in known:
            known[m] = scorer.probability(m)
        return known[m]

    stops = [*np.round(np.arange(lowest_stop_at, 0.991, 0.02), 2), *([1.0] if agree is not None else [])]
    for stop_at in stops:
        for verify_at in sorted({*np.round(np.arange(0.0, stop_at, 0.1), 2), stop_at}):
            policy = StopPolicy(name, weights, float(stop_at), float(verify_at), opening, agree)
            yield policy, evaluate(lambda m, p=policy: p.action(probability(m), m), items, orders,
                                   opening or "prose")


def choose_thresholds(name: str, weights: tuple[float, ...], items: Sequence[ItemDraws], orders: int,
                      objective: Objective, opening: Opening | None = None,
                      agree: int | None = None) -> StopPolicy:
    """The (stop_at, verify_at) of the best `objective` on `items`, over `frontier`'s grid."""
    best: tuple[float, StopPolicy] | None = None
    for policy, outcomes in frontier(name, weights, items, orders, lowest_stop_at=objective.lowest_stop_at(),
                                     opening=opening, agree=agree):
        value = objective.value(outcomes)
        if best is None or value > best[0] + 1e-12:
            best = (value, policy)
    assert best is not None
    return best[1]


def learn_policy(name: str, items: Sequence[ItemDraws], *, orders: int = 8, objective: Objective = Objective(),
                 l2: float = 1e-3, opening: Opening | None = None, agree: int | None = None) -> StopPolicy:
    """Fit P(leader right | moment) on `items` (runs opened as `opening` says: prose when None, the format-1
    policy that runs the team's first written voter), then the thresholds for `objective` (by default a price of
    0.05 accuracy per 1,000 tokens: 5 points for 1,000 tokens), with the agreement floor `agree` if given."""
    weights = learn_weights(items, orders, l2, opening or "prose", program_logprobs=opening is None)
    return choose_thresholds(name, weights, items, orders, objective, opening, agree)


def pareto(points: Sequence[Point]) -> list[Point]:
    """The points no other beats on both accuracy and tokens (none more accurate at no more tokens), cheapest
    first."""
    out: list[Point] = []
    for point in sorted(points, key=lambda q: (q.tokens, -q.accuracy)):
        if not out or point.accuracy > out[-1].accuracy + 1e-12:
            out.append(point)
    return out


def allocate(fronts: Mapping[str, Sequence[Point]], pairs: Mapping[str, int], cap: float) -> dict[str, Point]:
    """One point per answer kind for a budget over all of them: the most pooled accuracy (each kind weighing its
    `pairs`, as a pooled claim counts them) at pooled mean tokens <= `cap` per pair; if no combination fits, the
    cheapest. A kind where accuracy is cheap takes the tokens a kind where it is dear would waste."""
    kinds = sorted(fronts)
    total = sum(pairs[k] for k in kinds)
    best: tuple[float, dict[str, Point]] | None = None
    for combo in product(*(pareto(fronts[k]) for k in kinds)):
        tokens = sum(pairs[k] * q.tokens for k, q in zip(kinds, combo, strict=True)) / total
        accuracy = sum(pairs[k] * q.accuracy for k, q in zip(kinds, combo, strict=True)) / total
        value = accuracy if tokens <= cap else -tokens
        if best is None or value > best[0] + 1e-12:
            best = (value, dict(zip(kinds, combo, strict=True)))
    if best is None:
        raise ValueError("allocate needs at least one point per kind")
    return best[1]
