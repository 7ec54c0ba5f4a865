"""Choose the default's teams (`prompts/teams.yaml`, what `lemon run` and the `template` method run) on items the
six-benchmark table never scores, by a rule written down before anything here was computed (issue 55, point 1).

The rule:
- Items. number: GSM8K, SVAMP and MultiArith `train` items 1-20, seed 0 (60 pairs: the pairs whose 5 prose and 5
  program voters the bank holds, `experiments/runtime_bank.sh train`); choice: AQuA and MMLU `dev` items 1-20,
  seed 0 (40 pairs, `experiments/choice_team.sh`'s bank). Never the table's `test` (MMLU `val`) items. code: no new
  candidate; the decision between exsc's team and one programmer stands as measured on the 40 HumanEval `train`
  items (teams.yaml, docs/results.md "The code team decided by the task's examples").
- Candidates that need neither a reply's score nor a sandbox: one CoT voter, agree 2 of 3 (the default before),
  esc (agree 2 of 5), asc (confidence 0.95 of 5) and the 5-vote. On numbers, the program cross-check (a prose
  voter, then a program voter, then esc over the rest): it needs the sandbox. Candidates that read the replies'
  log-probabilities: the logprob gate (-30 nats, then agree 2 of 5), cges (posterior 0.95 of 5) and, on numbers,
  the learned rule (`stop: {learned: number}`, the one packaged policy; it also needs the sandbox).
- Measure: accuracy and worker tokens per item, expected over 24 draw orders of the banked draws, pooled over the
  kind's pairs (`stop_rules_table.replay`: the real Executor on an offline pool). Paired against the default
  before: the pairs each is right on more often / less often over the orders, and a sign test on those counts.
  The learned rule is fit on these very pairs, so it enters only by its 5-fold cross-validated result (fit without
  the item's fold, 8 orders, `learn_stop_rule.cross_validate`), beside the fixed rules the same simulator restates
  on the same pairs (esc, asc, the 5-vote, the cross-check), and once more with its replies' log-probabilities
  hidden (a pool that cannot score them).
- Winner of a set of candidates: the most accurate; any candidate within 1 point of it that costs fewer tokens
  wins instead (the cheapest within 1 point). Winners are taken for three settings: any pool and machine (the
  candidates that need nothing), a machine with a sandbox, a pool that also scores replies.
- A candidate that needs the sandbox or scores is the default only where they exist, the winner of the setting
  below falling back for it. The sandbox fallback is one more team in teams.yaml, as the code kind's
  `code_unchecked` is: built whenever the sandbox winner is not the any-pool winner. A scoring fallback is dearer:
  the template knows the pool's levels, not whether they score, so it would need the pool passed in and a team
  per pool kind. Not built, therefore, unless it pays a lot: the learned rule (which still runs on a reply
  without a log-probability, a case its features hold) is the default on every pool with a sandbox if it wins
  with its log-probabilities hidden too; a rule that cannot run without scores (the gate, cges) or the learned
  rule winning only with them becomes a pool-dependent default only by more than 3 points (two pairs in 60) over
  the sandbox winner; otherwise the sandbox winner is the default on every pool with a sandbox.

Usage: LEMON_DATA_DIR=../shared/data python experiments/choose_default.py [--store S] [--orders 24] [--limit 20]
       [--folds 5] [--cv-orders 8] [--price 0.05]
The store (read-only) holds the 5-voter banks' runs: `runtime_bank.sh train`'s (the default) or any store whose
runs cover the items (the draws are in the committed bank: `lemon eval` of those runs makes no worker call).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import statistics
from pathlib import Path

from learn_stop_rule import collect, cross_validate
from stop_rules_table import Outcome, replay

from lemon.benchmarks.registry import load_split
from lemon.errors import LemonError, run_script
from lemon.evaluation.report import mcnemar_exact
from lemon.evaluation.store import ResultsStore
from lemon.paths import lemon_home
from lemon.train.stop_learning import ItemDraws

log = logging.getLogger("choose_default")
KIND_SPLITS = {"number": (("gsm8k", "train"), ("svamp", "train"), ("multiarith", "train")),
               "choice": (("aqua", "dev"), ("mmlu", "dev"))}
BEFORE = "agree 2 of 3"  # the default before, what every candidate is paired with
#: Candidates by what they need: "" nothing, "sandbox" program voters, "scores" the replies' log-probabilities.
NEEDS = {"cot (voter 1)": "", "agree 2 of 3": "", "agree 2 of 5 (esc)": "", "confidence 0.95 of 5 (asc)": "",
         "sc-cot 5": "", "mixed CPCCC": "sandbox", "sure -30 + agree 2 of 5": "scores",
         "posterior 0.95 of 5 (cges)": "scores"}
SETTINGS = (("any pool", {""}), ("with a sandbox", {"", "sandbox"}), ("scoring pool, sandbox", set(NEEDS.values())))
MARGIN = 1.0  # points: within it, the cheaper wins


def winner(rows: dict[str, tuple[float, float]]) -> str:
    """The most accurate of `rows` (name -> (accuracy %, tokens)), or the cheapest within MARGIN of it."""
    top = max(acc for acc, _ in rows.values())
    return min((n for n, (acc, _) in rows.items() if acc >= top - MARGIN), key=lambda n: rows[n][1])


def better_worse(a: Outcome, b: Outcome) -> str:
    """Pairs `a` is right on more often than `b` over the draw orders / less often, and the sign test."""
    more = sum(a.correct[k] > b.correct[k] + 1e-9 for k in a.correct)
    less = sum(a.correct[k] < b.correct[k] - 1e-9 for k in a.correct)
    return f"{more}/{less}, p = {mcnemar_exact(more, less):.2g}"


async def kind_outcomes(kind: str, store: ResultsStore, args: argparse.Namespace) -> dict[str, Outcome]:
    """Every candidate of `kind` on its pairs, pooled over its benchmarks; a scoring rule the bank cannot replay
    (a score it lacks) is left out, said in the log."""
    pooled: dict[str, Outcome] = {}
    mixed = ("CPCCC",) if kind == "number" else ()
    plain = tuple(n for n, need in NEEDS.items() if need != "scores")
    scoring = ("cot (voter 1)", "sc-cot 5", *(n for n, need in NEEDS.items() if need == "scores"))
    for bench, split in KIND_SPLITS[kind]:
        found, _ = await replay(bench, "large", store, split=split, orders=args.orders, mixed=mixed,
                                limit=args.limit, teams=plain)
        try:
            found |= (await replay(bench, "large", store, split=split, orders=args.orders, limit=args.limit,
                                   teams=scoring))[0]
        except LemonError as exc:
            log.warning("%s %s: the scoring rules are not replayable from the bank (%s)", bench, split, exc)
        for name, o in found.items():
            into = pooled.setdefault(name, Outcome())
            into.correct |= o.correct
            into.tokens |= o.tokens
            into.voters |= o.voters
    full = set(pooled[BEFORE].correct)
    return {n: o for n, o in pooled.items() if set(o.correct) == full}


def kind_table(kind: str, outcomes: dict[str, Outcome]) -> list[str]:
    """The candidates' rows and each setting's winner."""
    rows = {n: (100 * statistics.mean(o.correct.values()), statistics.mean(o.tokens.values()))
            for n, o in outcomes.items()}
    before = outcomes[BEFORE]
    lines = [f"### {kind}: {len(before.correct)} pairs, expected over the draw orders", "",
             "| candidate | needs | accuracy % | worker tokens / item | voters | vs agree 2 of 3 (more/less, p) |",
             "|---|---|---|---|---|---|"]
    for n, o in outcomes.items():
        lines.append(f"| {n} | {NEEDS[n] or '-'} | {rows[n][0]:.1f} | {rows[n][1]:,.0f} | "
                     f"{statistics.mean(o.voters.values()):.2f} | {better_worse(o, before)} |")
    lines.append("")
    for setting, needs in SETTINGS:
        allowed = {n: r for n, r in rows.items() if NEEDS[n] in needs}
        name = winner(allowed)
        lines.append(f"Winner ({setting}): {name}, {rows[name][0]:.1f} % at {rows[name][1]:,.0f} tokens.")
    return [*lines, ""]


def without_scores(d: ItemDraws) -> ItemDraws:
    """The item's draws as a pool that cannot score replies shows them: no log-probability."""
    def hide(draws: tuple) -> tuple:  # type: ignore[type-arg]
        return tuple(dataclasses.replace(x, reply=dataclasses.replace(x.reply, logprob=None)) for x in draws)
    return dataclasses.replace(d, prose=hide(d.prose), programs=hide(d.programs))


async def learned_table(store: ResultsStore, args: argparse.Namespace) -> list[str]:
    """The learned number rule, cross-validated by item, beside the fixed rules in the same simulator."""
    splits = [f"{b}:{s}" for b, s in KIND_SPLITS["number"]]
    first = {str(i.id) for b, s in KIND_SPLITS["number"] for i in load_split(b, s)[:args.limit]}
    items = [d for d in await collect(store, splits, {}) if d.key.split("@")[0] in first]
    shown = cross_validate(items, args.folds, args.cv_orders, args.price)
    hidden = cross_validate(items, args.folds, args.cv_orders, args.price, shown=without_scores)["learned"]
    rows = {**shown, "learned, log-probabilities hidden": hidden}
    lines = [f"### number, the learned rule: {len(items)} pairs, {args.folds}-fold cross-validated by item, "
             f"{args.cv_orders} orders", "", "| rule | accuracy % | worker tokens / item | voters |",
             "|---|---|---|---|"]
    for name, outcomes in rows.items():
        values = list(outcomes.values())
        lines.append(f"| {name} | {100 * statistics.mean(o.right for o in values):.1f} | "  # type: ignore[attr-defined]
                     f"{statistics.mean(o.tokens for o in values):,.0f} | "  # type: ignore[attr-defined]
                     f"{statistics.mean(o.voters for o in values):.2f} |")  # type: ignore[attr-defined]
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=lemon_home() / "runtime-bank.sqlite")
    ap.add_argument("--orders", type=int, default=24, help="draw orders each team is replayed in")
    ap.add_argument("--limit", type=int, default=20, help="the first N items of each split")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--cv-orders", type=int, default=8, help="draw orders of the learned rule's simulator")
    ap.add_argument("--price", type=float, default=0.05, help="the learned rule's token price (its packaged one)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    lines: list[str] = []
    with ResultsStore(args.store, read_only=True) as store:
        for kind in KIND_SPLITS:
            lines += kind_table(kind, asyncio.run(kind_outcomes(kind, store, args)))
        lines += asyncio.run(learned_table(store, args))
    lines.append("code: no new candidate; exsc's team behind the task's examples, one programmer without them, "
                 "stands as measured on the 40 HumanEval `train` items (prompts/teams.yaml).")
    print("\n".join(lines))


if __name__ == "__main__":
    run_script(main)
