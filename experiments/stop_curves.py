"""Stop rules at matched tokens: every rule's accuracy-tokens curve over its threshold, replayed from the sample bank.

The baselines a learned stop rule must beat (issue 54, point 3), each a fixed team swept over its threshold:
CoT-SC (a k-vote, k = 1..5: "CoT-SC at equal cost"), esc (agree k of 5), asc (Adaptive-Consistency's Beta
criterion at c), the gate (a voter whose reply scores >= t nats is taken alone, else agree 2 of 5), cges (the
vote's answer's confidence-weighted posterior >= c, `stop: {posterior: c}`, after CGES, arXiv 2511.02603) and,
on number benchmarks, the program cross-check (`cross-check`: a CoT voter, then a program voter, stop if they
agree, else esc over the rest). Every team runs through the real Executor on an OFFLINE pool (no model call; a
request or a score the bank lacks is an error), on every (item, seed) the store's 5-voter sc-cot bank holds,
in the bank's written order of draws: each team is paired with every other.

Printed: each rule's points (accuracy and worker tokens per item, pooled over the benchmarks, and each
benchmark's accuracy); then, per token budget B (mean worker tokens per item), what each rule reaches at
matched tokens, two ways: its best point at or below B (a threshold one can run), and its accuracy interpolated
at B between its two points nearest B on either side in tokens, among those no cheaper point of the rule beats
(what running the cheaper threshold on a share of the items and the dearer on the rest gives in expectation;
past its dearest such point, that point's accuracy; none below its cheapest point). Each rule's best point at
or below B is compared with CoT-SC's best point at or below B on the same pairs (exact McNemar: items only this
rule got right / only CoT-SC got right, and p).

Usage: LEMON_DATA_DIR=../shared/data python experiments/stop_curves.py [--store S] [--benchmarks gsm8k svamp
       multiarith] [--split train] [--limit 20] [--seeds 1] [--level large] [--pool cpu] [--budget 600 900]
       [--no-programs] [--json F]
The store is only read (opened read-only); the LLM cache is the pool's own (`--pool`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.errors import LemonError, run_script
from lemon.evaluation.bank import bank_keys, bank_params, vote_team
from lemon.evaluation.baselines import GATE_LOGPROB, baseline_spec, supports
from lemon.evaluation.item import item_seed
from lemon.evaluation.report import mcnemar_exact
from lemon.evaluation.store import ResultsStore
from lemon.files import write_output
from lemon.llm.pools import load_pool
from lemon.paths import lemon_home
from lemon.runtime import Executor, NodeCache
from lemon.spec.model import Spec, StopRule
from lemon.spec.roles import RoleLibrary
from lemon.train.budget_teacher import GATE_MENU

log = logging.getLogger("stop_curves")
Key = tuple[str, str, int]  # (benchmark, item id, seed)
#: The family every other is compared with at matched tokens: self-consistency at equal cost.
COT_SC = "CoT-SC (k-vote)"
CONFIDENCES = (0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
POSTERIORS = (0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99)
GATES = tuple(sorted({GATE_LOGPROB, *GATE_MENU}, reverse=True))
CROSS_CHECK = "program cross-check"


@dataclass(frozen=True)
class Rule:
    """One point of one rule's curve: the family, its threshold as shown, and its team for (kind, level)."""

    family: str
    threshold: str
    team: Callable[[str, str], Spec]
    programs: bool = False  # it runs program voters: number benchmarks only
    kinds: tuple[str, ...] | None = None  # the answer kinds it runs on (None: every kind)

    @property
    def label(self) -> str:
        return f"{self.family} {self.threshold}"

    def runs_on(self, kind: str) -> bool:
        return (not self.programs or supports("cross-check", kind)) and (self.kinds is None or kind in self.kinds)


def _vote(voters: int, rule: StopRule | None) -> Callable[[str, str], Spec]:
    return lambda kind, level: vote_team(kind, level, voters, rule)


def rules(programs: bool = True) -> list[Rule]:
    """Every rule's sweep, cheapest family first; the cross-check only `programs`."""
    out = [Rule(COT_SC, f"k={k}", _vote(k, None)) for k in range(1, 6)]
    out += [Rule("esc (agree k of 5)", f"k={k}", _vote(5, StopRule(agree=k))) for k in (2, 3, 4)]
    out += [Rule("asc (Beta >= c)", f"c={c}", _vote(5, StopRule(confidence=c))) for c in CONFIDENCES]
    out += [Rule("gate (logprob >= t, agree 2)", f"t={t}", _vote(5, StopRule(logprob=t, agree=2))) for t in GATES]
    out += [Rule("cges (posterior >= c)", f"c={c}", _vote(5, StopRule(posterior=c))) for c in POSTERIORS]
    if programs:
        out.append(Rule(CROSS_CHECK, "CPCCC", lambda kind, level: baseline_spec("cross-check", kind, level=level),
                        programs=True))
    return out


@dataclass
class Curve:
    """One rule point's results per (benchmark, item, seed): right or not, worker tokens, voters run."""

    correct: dict[Key, bool] = field(default_factory=dict)
    tokens: dict[Key, int] = field(default_factory=dict)
    voters: dict[Key, int] = field(default_factory=dict)

    def accuracy(self, keys: Sequence[Key] | None = None) -> float:
        keys = list(self.correct) if keys is None else keys
        return 100 * statistics.mean(self.correct[k] for k in keys)

    def mean_tokens(self) -> float:
        return statistics.mean(self.tokens.values())

    def only(self, keys: set[Key]) -> Curve:
        """The same results on `keys` only (every rule compared on the same pairs)."""
        return Curve(*({k: v for k, v in d.items() if k in keys} for d in (self.correct, self.tokens, self.voters)))


def bank_pairs(store: ResultsStore, benchmark: str, level: str, split: str, limit: int | None,
               seeds: int | None) -> tuple[list[tuple[object, int]], dict[str, object]]:
    """(item, seed) pairs the bank holds for `benchmark`, the first `limit` items of the split only."""
    keys, config = bank_keys(store, benchmark, level, seeds, split)
    items = load_split(benchmark, split)[:limit] if limit else load_split(benchmark, split)
    return [(item, seed) for item in items for seed in sorted(s for i, s in keys if i == str(item.id))], config


async def replay(benchmark: str, store: ResultsStore, chosen: list[Rule], curves: dict[str, Curve],
                 args: argparse.Namespace, tolerant: bool = False) -> int:
    """Every rule of `chosen` on every banked pair of `benchmark`, offline; returns the pairs replayed. A rule the
    bank cannot answer on a pair is an error, or (`tolerant`) leaves that pair out of the rule's curve."""
    task = get_benchmark(benchmark)
    pairs, config = bank_pairs(store, benchmark, args.level, args.split, args.limit, args.seeds)
    pool = load_pool(args.pool, offline=True)
    # a program runs once
    executor = Executor(pool, RoleLibrary.load(), params=bank_params(pool, config), node_cache=NodeCache())
    for item, seed in pairs:
        run_seed = item_seed(benchmark, item.id, seed)  # type: ignore[attr-defined]
        for rule in chosen:
            if not rule.runs_on(task.kind):
                continue
            result = await executor.run(rule.team(task.kind, args.level), task.prompt(item), seed=run_seed,
                                        vote_key=lambda text, it=item: task.extract(text, it))
            if result.status != "ok" and tolerant:
                log.info("%s %s seed %s, %s: not in the bank (%s)", benchmark, item.id, seed, rule.label,  # type: ignore[attr-defined]
                         result.stop_reason)
                continue
            if result.status != "ok":
                raise LemonError(f"{benchmark} {item.id} seed {seed}, {rule.label}: {result.stop_reason}; "  # type: ignore[attr-defined]
                                 "bank what it lacks first (or leave the program cross-check out: --no-programs)")
            pred, key = task.extract(result.answer, item), (benchmark, str(item.id), seed)  # type: ignore[attr-defined]
            curve = curves.setdefault(rule.label, Curve())
            curve.correct[key] = pred is not None and bool(task.check(pred, item))
            curve.tokens[key] = result.total_tokens
            curve.voters[key] = sum(1 for a in result.tokens_by_agent if a != "vote")
    return len(pairs)


# ---- matched tokens -----------------------------------------------------------------------------------


def best_at_or_below(points: list[tuple[str, Curve]], budget: float) -> tuple[str, Curve] | None:
    """The most accurate point whose mean tokens are <= `budget` (ties: the cheaper), or None."""
    under = [p for p in points if p[1].mean_tokens() <= budget]
    return max(under, key=lambda p: (p[1].accuracy(), -p[1].mean_tokens())) if under else None


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (tokens, accuracy) points no cheaper (or equally cheap) point matches in accuracy, by tokens."""
    out: list[tuple[float, float]] = []
    for p in sorted(points, key=lambda p: (p[0], -p[1])):
        if not out or p[1] > out[-1][1]:
            out.append(p)
    return out


def interpolated(points: list[tuple[float, float]], budget: float) -> float | None:
    """Accuracy at `budget` tokens, linear between the rule's two frontier points nearest `budget` on either side
    (`frontier`: a threshold that a cheaper one beats is never worth mixing in); past its dearest frontier point,
    that point's accuracy (the rule need not spend the budget); None below its cheapest point."""
    front = frontier(points)
    below = [p for p in front if p[0] <= budget]
    above = [p for p in front if p[0] >= budget]
    if not below:
        return None
    lo = below[-1]
    if not above or above[0][0] == lo[0]:
        return lo[1]
    hi = above[0]
    return lo[1] + (hi[1] - lo[1]) * (budget - lo[0]) / (hi[0] - lo[0])


def paired(a: Curve, b: Curve) -> str:
    """Exact McNemar on the pairs both hold: `only a right / only b right, p`."""
    keys = a.correct.keys() & b.correct.keys()
    only_a = sum(a.correct[k] and not b.correct[k] for k in keys)
    only_b = sum(b.correct[k] and not a.correct[k] for k in keys)
    return f"{only_a}/{only_b}, p = {mcnemar_exact(only_a, only_b):.2g}"


def families(chosen: list[Rule], curves: dict[str, Curve]) -> dict[str, list[tuple[str, Curve]]]:
    out: dict[str, list[tuple[str, Curve]]] = {}
    for rule in chosen:
        if rule.label in curves:
            out.setdefault(rule.family, []).append((rule.threshold, curves[rule.label]))
    return out


def points_table(fams: dict[str, list[tuple[str, Curve]]], benchmarks: list[str]) -> list[str]:
    """Each family's points (`families`): accuracy, tokens and voters over its pairs, and each benchmark's accuracy."""
    head = " | ".join(f"{b} %" for b in benchmarks)
    lines = [f"| rule | threshold | accuracy % | worker tokens / item | voters run | pairs | {head} |",
             "|---|---|---|---|---|---|" + "---|" * len(benchmarks)]
    for family, points in fams.items():
        for threshold, c in points:
            per = " | ".join(_bench_accuracy(c, b) for b in benchmarks)
            lines.append(f"| {family} | {threshold} | {c.accuracy():.1f} | {c.mean_tokens():.0f} | "
                         f"{statistics.mean(c.voters.values()):.2f} | {len(c.correct)} | {per} |")
    return lines


def _bench_accuracy(curve: Curve, benchmark: str) -> str:
    keys = [k for k in curve.correct if k[0] == benchmark]
    return f"{curve.accuracy(keys):.1f}" if keys else "—"


def matched_table(chosen: list[Rule], curves: dict[str, Curve], budget: float) -> list[str]:
    """Each rule at `budget` tokens: its best point at or below, its interpolated accuracy, and the paired test
    of its best point against CoT-SC's."""
    fams = families(chosen, curves)
    reference = best_at_or_below(fams[COT_SC], budget) if COT_SC in fams else None
    lines = [f"At {budget:.0f} worker tokens per item (CoT-SC's best point at or below: "
             f"{_point(reference)}):", "",
             "| rule | best point at or below (accuracy %, tokens) | interpolated accuracy % | vs CoT-SC there |",
             "|---|---|---|---|"]
    for family, points in fams.items():
        best = best_at_or_below(points, budget)
        tokens = [(c.mean_tokens(), c.accuracy()) for _, c in points]
        inter = interpolated(tokens, budget)
        versus = paired(best[1], reference[1]) if best and reference and family != COT_SC else "—"
        shown = f"{inter:.1f}" if inter is not None else f"— (its cheapest point costs {min(t for t, _ in tokens):.0f})"
        lines.append(f"| {family} | {_point(best)} | {shown} | {versus} |")
    return [*lines, ""]


def _point(point: tuple[str, Curve] | None) -> str:
    if point is None:
        return "none (every point costs more)"
    return f"{point[0]}: {point[1].accuracy():.1f}, {point[1].mean_tokens():.0f}"


def default_budgets(curves: dict[str, Curve]) -> list[float]:
    """The 2-, 3- and 4-vote's tokens: CoT-SC's own points, so it is compared exactly there."""
    return [round(curves[f"{COT_SC} k={k}"].mean_tokens()) for k in (2, 3, 4) if f"{COT_SC} k={k}" in curves]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=lemon_home() / "runtime-bank.sqlite",
                    help="the results store whose 5-voter sc-cot runs say which pairs are banked (read only)")
    ap.add_argument("--benchmarks", nargs="+", default=["gsm8k", "svamp", "multiarith"])
    ap.add_argument("--split", default="train")
    ap.add_argument("--limit", type=int, default=20, help="the first N items of the split (0: every banked one)")
    ap.add_argument("--seeds", type=int, help="only seeds 0..N-1")
    ap.add_argument("--level", default="large")
    ap.add_argument("--pool", default="cpu", help="the pool the bank was built with (its LLM cache answers)")
    ap.add_argument("--budget", type=float, nargs="*", default=[],
                    help="token budgets per item to match the rules at (default: the 2-, 3- and 4-vote's tokens)")
    ap.add_argument("--no-programs", action="store_true", help="leave out the program cross-check")
    ap.add_argument("--json", type=Path, help="also write every rule point's per-pair results here")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    chosen, curves = rules(programs=not args.no_programs), {}
    if not args.store.is_file():
        raise LemonError(f"no results store at {args.store}: give --store (a store with the bank's sc-cot runs)")
    with ResultsStore(args.store, read_only=True) as store:
        counts = {b: asyncio.run(replay(b, store, chosen, curves, args)) for b in args.benchmarks}
    print(f"## Stop rules at matched tokens, `{args.split}`: "
          + ", ".join(f"{b} {n} pairs" for b, n in counts.items()) + ", replayed from the sample bank\n")
    print("\n".join(points_table(families(chosen, curves), args.benchmarks)) + "\n")
    for budget in args.budget or default_budgets(curves):
        print("\n".join(matched_table(chosen, curves, budget)))
    if args.json:
        write_output(args.json, json.dumps({label: {"correct": {"/".join(map(str, k)): v for k, v in c.correct.items()},
                                                    "tokens": {"/".join(map(str, k)): v for k, v in c.tokens.items()}}
                                            for label, c in curves.items()}, indent=1),
                     what="the curves", fix="pass --json another path")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    run_script(main)
