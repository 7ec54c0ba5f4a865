"""The judged stop rules per seed and against the baselines the verdicts do not name (issue 54), AFTER the
registered judgement (experiments/judge_stop_rule.py): descriptive only, no verdict. It reruns the judgement's
replay (the same counted pairs, offline, ~5 minutes on 2 cores) and prints, per rule point, its accuracy on
each seed and their mean ± std (the sample std over the seeds, as `lemon.evaluation.report` reports it), its
mean worker tokens, and exact McNemar tests (`only a right / only b right, p`) of each learned rule against the
5-vote, the program cross-check (number pairs only: no program voter answers a letter) and each family's most
accurate point at or below the rule's tokens x 1.05.

Usage: LEMON_DATA_DIR=../shared/data python experiments/stop_rule_seeds.py [--store S] [--pool cpu]
"""

from __future__ import annotations

import argparse
import logging
import statistics
from pathlib import Path

from judge_stop_rule import DESIGNS, FIVE_VOTE, drawn_before, judge
from stop_curves import COT_SC, CROSS_CHECK, Curve, best_at_or_below, paired

from lemon.errors import LemonError, run_script
from lemon.evaluation.store import ResultsStore
from lemon.paths import lemon_home

log = logging.getLogger("stop_rule_seeds")


def per_seed(curve: Curve) -> str:
    """`s0 %, s1 %, mean ± std` of one curve over its seeds."""
    seeds = sorted({k[2] for k in curve.correct})
    accs = [curve.accuracy([k for k in curve.correct if k[2] == s]) for s in seeds]
    cells = ", ".join(f"seed {s} {a:.1f} %" for s, a in zip(seeds, accs, strict=True))
    return f"{cells}; {statistics.mean(accs):.1f} ± {statistics.stdev(accs):.1f} %"


def lines(fams: dict[str, list[tuple[str, Curve]]], rules: dict[str, Curve]) -> list[str]:
    """The per-seed table and each learned rule's paired tests."""
    out = ["| rule | point | per seed | tokens / item | pairs |", "|---|---|---|---:|---:|"]
    shown = {name: [("as committed", c)] for name, c in rules.items()} | fams
    for family, points in shown.items():
        out += [f"| {family} | {t} | {per_seed(c)} | {c.mean_tokens():,.0f} | {len(c.correct)} |" for t, c in points]
    five = dict(fams[COT_SC])[FIVE_VOTE]
    cross = dict(fams.get(CROSS_CHECK, [])).get("CPCCC")
    out.append("")
    for name, rule in rules.items():
        out.append(f"{name} against the 5-vote: {paired(rule, five)}")
        if cross is not None:
            nums = set(cross.correct)
            out.append(f"{name} against the program cross-check (number pairs): "
                       f"{paired(rule.only(nums), cross)} (learned {rule.only(nums).accuracy():.1f} % at "
                       f"{rule.only(nums).mean_tokens():.0f} tokens, cross-check {cross.accuracy():.1f} % at "
                       f"{cross.mean_tokens():.0f})")
        for family, points in fams.items():
            if family in (CROSS_CHECK, COT_SC) or family.startswith("learned"):
                continue
            best = best_at_or_below(points, rule.mean_tokens() * 1.05)
            if best:
                out.append(f"{name} against {family} {best[0]} ({best[1].accuracy():.1f} % at "
                           f"{best[1].mean_tokens():.0f}): {paired(rule, best[1])}")
            else:
                out.append(f"{name} against {family}: no point at or below its tokens x 1.05")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=lemon_home() / "runtime-bank.sqlite")
    ap.add_argument("--pool", default="cpu")
    args = ap.parse_args()
    if not args.store.is_file():
        raise LemonError(f"no results store at {args.store}: give --store (a store with the bank's sc-cot runs)")
    design = DESIGNS["test"]
    with ResultsStore(args.store, read_only=True) as store:
        judged = judge(store, design, args.pool, drawn_before(None))
    if len(judged.counted) < design.required:
        raise LemonError(f"{len(judged.counted)} of {design.required} pairs banked: finish the bank first "
                         "(experiments/runtime_bank.sh test)")
    rules = {"learned (packaged)": judged.learned, "learned, budget (trial)": judged.trial}
    print("\n".join(lines(judged.fams, rules)))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    run_script(main)
