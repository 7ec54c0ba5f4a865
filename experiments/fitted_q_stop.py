"""Can a richer learned controller spend a token budget better than the packaged two-threshold policy? A study on
the TRAINING draws only (issue 54): fitted Q-iteration over the three run-time actions.

The packaged policy (`lemon.spec.stops.policy.StopPolicy`) is one probability, P(leader right | moment), and two
thresholds on it; every run opens with a prose voter. Here each action gets its own value instead: Q(m, stop) is
that probability (the same weighted logistic fit), and Q(m, prose) and Q(m, program) are linear in the same
features, fit by ridge regression on the bank's transitions to max over the next moment's actions, less the voter's
tokens at `price` accuracy per 1,000 tokens, iterated to the horizon (at most 10 voters). The opening voter is a
decision too (from the empty moment: the task's length and the voters left). The bank holds every draw of every
training item, so every transition is exact: random interleavings of prose and program voters in 8 draw orders
an item, each item weighing 1, as `stop_learning.training_moments` draws them.

Reported per price: accuracy, tokens as a share of the 5-vote's and voters, 5-fold cross-validated by item (the
controller fit without the item's fold) and in-sample, each expected over the 8 draw orders. Read beside the fixed
rules of `learn_stop_rule.py`'s table (`program esc`: program voters first, agree 2).

Usage: python experiments/learn_stop_rule.py --collect-only --draws D.jsonl   (the training draws, once)
       python experiments/fitted_q_stop.py --draws D.jsonl [--kind number] [--prices 0.1 0.14 0.2]
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from learn_stop_rule import draws_from_json, fixed_rules

from lemon.errors import LemonError, run_script
from lemon.spec.stops.policy import features
from lemon.train.stop_learning import Draw, ItemDraws, draw_orders, evaluate, fit_probability, fold_split, moment

log = logging.getLogger("fitted_q_stop")
ORDERS, PATHS, ITERATIONS = 8, 4, 12


@dataclass(frozen=True, slots=True)
class Transitions:
    """Shapes: n transitions, F features. x (n, F) the moment an action was taken at; action (n,) 0 prose, 1
    program; tokens (n,) the voter's; after (n, F) the next moment; open_after (n, 3) which of stop, prose, program
    it allows; right_after (n,) whether its leader is right; weight (n,) each item's transitions summing to 1."""

    x: np.ndarray
    action: np.ndarray
    tokens: np.ndarray
    after: np.ndarray
    open_after: np.ndarray
    right_after: np.ndarray
    weight: np.ndarray


def _features(item: ItemDraws, ran: Sequence[Draw], prose_left: int, programs_left: int) -> list[float]:
    return features(moment(item, ran, prose_left, programs_left))


def transitions(items: Sequence[ItemDraws], seed: int = 0) -> Transitions:
    """Every step of `PATHS` random interleavings in each of `ORDERS` draw orders per item, opening included."""
    rng, rows, weights = random.Random(seed), [], []
    for item in items:
        right, start = item.right_answers(), len(rows)
        for order in draw_orders(item, ORDERS):
            for _ in range(PATHS):
                prose, programs = [item.prose[i] for i in order[0]], [item.programs[i] for i in order[1]]
                ran: list[Draw] = []
                while prose or programs:
                    x = _features(item, ran, len(prose), len(programs))
                    action = int(bool(programs) and (not prose or rng.random() < 0.5))
                    ran.append(programs.pop(0) if action else prose.pop(0))
                    rows.append((x, action, ran[-1].tokens, _features(item, ran, len(prose), len(programs)),
                                 (True, bool(prose), bool(programs)), moment(item, ran, 0, 0).leader() in right))
        weights += [1.0 / (len(rows) - start)] * (len(rows) - start)
    columns = list(zip(*rows, strict=True))
    return Transitions(*(np.array(c, dtype=float) for c in columns[:4]), np.array(columns[4], dtype=bool),
                       np.array(columns[5], dtype=float), np.array(weights))


def ridge(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-3) -> np.ndarray:
    """Weighted ridge regression, the bias (column 0) unpenalised: x (n, F), y (n,), w (n,) -> (F,)."""
    penalty = l2 * w.sum() * np.eye(x.shape[1])
    penalty[0, 0] = 0.0
    return np.linalg.solve(x.T @ (x * w[:, None]) + penalty + 1e-9 * np.eye(x.shape[1]), (x * w[:, None]).T @ y)


@dataclass(frozen=True, slots=True)
class QController:
    """Q(m, stop) = sigmoid(stop . f(m)); Q(m, prose) = prose . f(m); Q(m, program) = program . f(m)."""

    stop: np.ndarray
    prose: np.ndarray
    program: np.ndarray

    def act(self, x: np.ndarray, prose_left: bool, programs_left: bool, opened: bool) -> int:
        """0 stop (never before the first voter), 1 a prose voter, 2 a program voter."""
        values = [1.0 / (1.0 + np.exp(-np.clip(x @ self.stop, -50, 50))) if opened else -np.inf,
                  x @ self.prose if prose_left else -np.inf, x @ self.program if programs_left else -np.inf]
        return int(np.argmax(values))


def fit_q(items: Sequence[ItemDraws], price: float) -> QController:
    """Fitted Q-iteration on `items`' transitions for `price` (accuracy per 1,000 tokens)."""
    t = transitions(items)
    stop = fit_probability(t.after, t.right_after, t.weight)
    stop_after = 1.0 / (1.0 + np.exp(-np.clip(t.after @ stop, -50, 50)))
    q = QController(stop, np.zeros(t.x.shape[1]), np.zeros(t.x.shape[1]))
    for _ in range(ITERATIONS):
        values = np.stack([stop_after, t.after @ q.prose, t.after @ q.program], axis=1)
        target = np.where(t.open_after, values, -np.inf).max(axis=1) - price * t.tokens / 1000
        prose, program = (ridge(t.x[t.action == a], target[t.action == a], t.weight[t.action == a]) for a in (0, 1))
        q = QController(stop, prose, program)
    return q


def play(q: QController, item: ItemDraws, order: tuple[tuple[int, ...], tuple[int, ...]]) -> tuple[float, ...]:
    """One run: (right, tokens, voters)."""
    prose, programs = [item.prose[i] for i in order[0]], [item.programs[i] for i in order[1]]
    ran: list[Draw] = []
    while prose or programs:
        action = q.act(np.array(_features(item, ran, len(prose), len(programs))), bool(prose), bool(programs),
                       bool(ran))
        if action == 0:
            break
        ran.append(programs.pop(0) if action == 2 else prose.pop(0))
    return float(moment(item, ran, 0, 0).leader() in item.right_answers()), float(sum(d.tokens for d in ran)), \
        float(len(ran))


def outcomes(q: QController, items: Sequence[ItemDraws]) -> np.ndarray:
    """(items, 3): each item's right, tokens and voters, expected over `ORDERS` draw orders."""
    return np.array([np.mean([play(q, item, o) for o in draw_orders(item, ORDERS)], axis=0) for item in items])


def cross_validated(items: list[ItemDraws], price: float, folds: int = 5) -> np.ndarray:
    parts = []
    for f in range(folds):
        fit_on, held = fold_split(items, folds, f)
        parts.append(outcomes(fit_q(fit_on, price), held))
    return np.concatenate(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=Path, required=True, help="training draws (learn_stop_rule.py --collect-only)")
    ap.add_argument("--kind", default="number", choices=["number", "choice"])
    ap.add_argument("--prices", type=float, nargs="+", default=[0.05, 0.1, 0.12, 0.14, 0.16, 0.2])
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.draws.is_file():
        raise LemonError(f"{args.draws}: no such draws file; write it with experiments/learn_stop_rule.py "
                         "--collect-only --draws FILE")
    items = [d for d in map(draws_from_json, args.draws.read_text().splitlines()) if d.task_kind == args.kind]
    if any("/test/" in d.key or "/val/" in d.key for d in items):
        raise LemonError(f"{args.draws} holds test items; this study reads training draws only")
    vote5 = evaluate(fixed_rules()["5-vote"][0], items, ORDERS)
    accuracy5, tokens5 = (statistics.mean(getattr(o, f) for o in vote5.values()) for f in ("right", "tokens"))
    log.info("%s: %d pairs; the 5-vote %.1f %% at %.0f tokens", args.kind, len(items), 100 * accuracy5, tokens5)
    log.info("| price | CV accuracy | CV tokens / 5-vote's | CV voters | in-sample accuracy | in-sample tokens |")
    log.info("|---|---|---|---|---|---|")
    for price in args.prices:
        cv, fit = cross_validated(items, price), outcomes(fit_q(items, price), items)
        log.info("| %s | %.1f %% | %.2f | %.2f | %.1f %% | %.2f |", price, 100 * cv[:, 0].mean(),
                 cv[:, 1].mean() / tokens5, cv[:, 2].mean(), 100 * fit[:, 0].mean(), fit[:, 1].mean() / tokens5)


if __name__ == "__main__":
    run_script(main)
