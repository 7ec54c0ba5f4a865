"""What a trained orchestrator could gain over the raised default by choosing its team BEFORE the team runs, measured
on the `train`/`dev` banks only (issue 55: decide whether training a policy can meet its bar before paying for it).

A spec-writing policy decides per item which team runs; the raised default already decides at run time (numbers:
the learned stop rule over prose and program voters; choices: agree 2 of 3; code: exsc's team where the task's
examples can be run). So the policy's room is: a cheaper or more accurate team than the default's, per benchmark
or per item, paid for with its own tokens (the prompt it reads and the spec it writes).

Menu (every team the bank replays exactly, restated over the banked draws by `lemon.train.stop_learning`): one CoT
voter, agree 2 of 3, esc (agree 2 of 5), asc (0.95), the 5-vote, and on numbers the program cross-check and the
learned rule (cross-validated by item: fit without the item's fold). Outcomes are expected over --orders draw orders.

Rows, each benchmark weighted equally (the six-benchmark table averages benchmark means):
- the default;
- per benchmark, the best fixed choice (what a policy that only tells benchmarks apart can write): the most
  accurate combination, and the cheapest within 1 point of the default's accuracy, its tokens over the default's;
- a per-item ORACLE (the cheapest team reaching the item's best expected accuracy): no pre-run policy does better;
- a per-item chooser cross-validated by item from what a policy reads (benchmark and question-length tercile),
  picking the team of best mean `right - price * tokens / 1000` on the other folds, at several prices.
The bar (issue 55, pooled): accuracy above the default's (a paired test would then be needed), or within 1 point
at <= 80 % of its tokens. Code enters as the default's own team (67.5 % at 815 tokens on 40 HumanEval `train`
items x 2, docs/notebook/2026-11-28.md: the policy's only other code teams lost there) plus the policy's tokens.

Pairs: seed 0 of the first --number-items (40) `train` items of GSM8K and SVAMP, --multiarith-items (20) of
MultiArith, and the first --choice-items (20) `dev` items of AQuA and MMLU: the training banks as they stood on
2026-11-29 (so the table is fixed while the banks grow); pairs the bank lacks are named (`runtime_bank.sh train`).

Usage: LEMON_DATA_DIR=../shared/data python experiments/policy_ceiling.py [--store S] [--draws F] [--orders 24]
       [--folds 5] [--price 0.05] [--spec-tokens 72] [--number-items 40] [--multiarith-items 20] [--choice-items 20]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from learn_stop_rule import (
    TRAIN_SPLITS,
    collect,
    cross_validate,
    draws_from_json,
    draws_to_json,
    fixed_rules,
)

from lemon.errors import LemonError, run_script
from lemon.evaluation.store import ResultsStore
from lemon.files import write_output
from lemon.paths import lemon_home
from lemon.spec.stops.policy import Moment
from lemon.train.budget_teacher import FRAMING_TOKENS, TASK_CHARS_PER_TOKEN
from lemon.train.stop_learning import ItemDraws, Outcome, evaluate

log = logging.getLogger("policy_ceiling")
DEFAULT = {"number": "learned (CV)", "choice": "agree 2 of 3"}
CODE = (67.5, 815.0)  # the default's code team on 40 HumanEval `train` items x 2 (see the module docstring)
MARGIN, SHARE = 1.0, 0.8  # the bar: within 1 point at <= 80 % of the default's tokens
PRICES = (0.0, 0.02, 0.05, 0.1, 0.2)
CHOICE_BENCHES = ("aqua", "mmlu")
CODE_PROMPT_TOKENS = 120  # a HumanEval prompt read by the policy (~460 characters at TASK_CHARS_PER_TOKEN)
Table = dict[str, dict[str, Outcome]]  # team -> item key -> outcome


def extra_rules() -> dict[str, Callable[[Moment], str]]:
    """One CoT voter and agree 2 of 3 (the default before), restated over moments as `fixed_rules` are."""
    def one(m: Moment) -> str:
        return "stop"

    def agree_2_of_3(m: Moment) -> str:
        return "stop" if m.leader_votes() >= 2 or len(m.replies) >= 3 or not m.prose_left else "prose"
    return {"cot (1 voter)": one, "agree 2 of 3": agree_2_of_3}


def outcomes(items: list[ItemDraws], args: argparse.Namespace) -> Table:
    """Every menu team's outcome on every item; the learned rule only on numbers, cross-validated."""
    table: Table = {name: evaluate(rule, items, args.orders) for name, rule in extra_rules().items()}
    numbers = [d for d in items if d.task_kind == "number"]
    choices = [d for d in items if d.task_kind == "choice"]
    cv = cross_validate(numbers, args.folds, args.orders, args.price)
    for name, (rule, opens) in fixed_rules().items():
        if opens != "prose":  # the menu as measured for issue 55; the program-first rule came later (issue 54)
            continue
        table[name] = {**cv[name], **evaluate(rule, choices, args.orders)}  # type: ignore[dict-item]
    table["learned (CV)"] = cv["learned"]  # type: ignore[assignment]
    return table


def bench_of(key: str) -> str:
    return key.split("/")[0]


def policy_tokens(item: ItemDraws, spec_tokens: float) -> float:
    """What the policy pays on the item: its terse prompt (framing and task) and the spec it writes."""
    return FRAMING_TOKENS["terse"] + item.task_chars / TASK_CHARS_PER_TOKEN + spec_tokens


def summarize(chosen: dict[str, str], table: Table, items: Sequence[ItemDraws], extra: float) -> tuple[float, float]:
    """(accuracy %, tokens) of a per-item team choice (item key -> team), benchmarks weighted equally, code as
    `CODE`; `extra` tokens per item (the policy's spec) on top of its prompt where a policy chooses."""
    by_bench: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for d in items:
        o = table[chosen[d.key]][d.key]
        paid = policy_tokens(d, extra) if extra else 0.0
        by_bench[bench_of(d.key)].append((o.right, o.tokens + paid))
    rows = [(100 * statistics.mean(r for r, _ in v), statistics.mean(t for _, t in v)) for v in by_bench.values()]
    code = (CODE[0], CODE[1] + (FRAMING_TOKENS["terse"] + CODE_PROMPT_TOKENS + extra if extra else 0.0))
    rows.append(code)
    return statistics.mean(a for a, _ in rows), statistics.mean(t for _, t in rows)


def default_choice(items: Sequence[ItemDraws]) -> dict[str, str]:
    return {d.key: DEFAULT[d.task_kind] for d in items}


def menu_of(kind: str, table: Table) -> list[str]:
    return [n for n in table if kind == "number" or n != "learned (CV)"]


def per_benchmark(table: Table, items: Sequence[ItemDraws], spec: float,
                  default: tuple[float, float]) -> list[str]:
    """Every combination of one team per benchmark: the most accurate, and the cheapest within MARGIN."""
    benches = sorted({bench_of(d.key) for d in items})
    kind = {bench_of(d.key): d.task_kind for d in items}
    results = []
    for combo in itertools.product(*(menu_of(kind[b], table) for b in benches)):
        team = dict(zip(benches, combo, strict=True))
        chosen = {d.key: team[bench_of(d.key)] for d in items}
        results.append((summarize(chosen, table, items, spec), team))
    best = max(results, key=lambda r: (r[0][0], -r[0][1]))
    near = [r for r in results if r[0][0] >= default[0] - MARGIN]
    cheap = min(near, key=lambda r: r[0][1])
    lines = []
    for label, ((acc, tok), team) in (("most accurate", best), ("cheapest within 1 point", cheap)):
        teams = ", ".join(f"{b} {t}" for b, t in team.items())
        lines.append(f"| per benchmark, {label} ({teams}) | {acc:.1f} | {tok:,.0f} | {tok / default[1]:.2f} |")
    return lines


def oracle(table: Table, items: Sequence[ItemDraws]) -> dict[str, str]:
    """Per item, the cheapest team reaching the item's best expected accuracy (knowing the outcomes)."""
    chosen = {}
    for d in items:
        menu = menu_of(d.task_kind, table)
        top = max(table[n][d.key].right for n in menu)
        chosen[d.key] = min((n for n in menu if table[n][d.key].right >= top - 1e-9),
                            key=lambda n: table[n][d.key].tokens)
    return chosen


def features(d: ItemDraws, cuts: dict[str, tuple[float, float]]) -> tuple[str, int]:
    """What a policy reads before any team runs: the benchmark and the question's length tercile within it."""
    low, high = cuts[bench_of(d.key)]
    return bench_of(d.key), int(d.task_chars > low) + int(d.task_chars > high)


def chooser(table: Table, items: Sequence[ItemDraws], folds: int, price: float) -> dict[str, str]:
    """Per item, the team of best mean `right - price * tokens / 1000` over the OTHER folds' items of the same
    benchmark and length tercile (folds by item, seeds together); no such item: that benchmark's best."""
    lengths: dict[str, list[int]] = defaultdict(list)
    for d in items:
        lengths[bench_of(d.key)].append(d.task_chars)
    cuts = {b: tuple(statistics.quantiles(v, n=3)) for b, v in lengths.items()}  # type: ignore[misc]
    names = sorted({d.key.split("@")[0] for d in items})
    fold = {n: i % folds for i, n in enumerate(names)}
    chosen = {}
    for d in items:
        f = fold[d.key.split("@")[0]]
        train = [e for e in items if fold[e.key.split("@")[0]] != f and bench_of(e.key) == bench_of(d.key)]
        cell = [e for e in train if features(e, cuts) == features(d, cuts)] or train  # type: ignore[arg-type]
        chosen[d.key] = max(menu_of(d.task_kind, table), key=lambda n: statistics.mean(
            table[n][e.key].right - price * table[n][e.key].tokens / 1000 for e in cell))
    return chosen


def report(table: Table, items: list[ItemDraws], args: argparse.Namespace) -> list[str]:
    default = summarize(default_choice(items), table, items, 0.0)
    pairs = Counter(bench_of(d.key) for d in items)
    lines = [f"Train/dev pairs: {dict(pairs)}; {args.orders} draw orders; code as the default's team ({CODE[0]} % "
             f"at {CODE[1]:,.0f} tokens). Policy rows pay the policy's prompt and a {args.spec_tokens}-token spec.",
             "", "| row | mean accuracy % | tokens / item | tokens / default's |", "|---|---:|---:|---:|",
             f"| the default (numbers: learned rule, CV; choices: agree 2 of 3) | {default[0]:.1f} | "
             f"{default[1]:,.0f} | 1.00 |"]
    for name in table:
        uniform = {d.key: name if name in menu_of(d.task_kind, table) else DEFAULT[d.task_kind] for d in items}
        acc, tok = summarize(uniform, table, items, 0.0)
        lines.append(f"| {name} everywhere it applies (no policy) | {acc:.1f} | {tok:,.0f} | {tok / default[1]:.2f} |")
    lines += per_benchmark(table, items, args.spec_tokens, default)
    acc, tok = summarize(oracle(table, items), table, items, args.spec_tokens)
    lines.append(f"| per-item ORACLE (knows the outcomes) | {acc:.1f} | {tok:,.0f} | {tok / default[1]:.2f} |")
    for price in PRICES:
        acc, tok = summarize(chooser(table, items, args.folds, price), table, items, args.spec_tokens)
        lines.append(f"| per-item chooser, benchmark + length tercile, CV, price {price} | {acc:.1f} | {tok:,.0f} | "
                     f"{tok / default[1]:.2f} |")
    return lines


def load_items(args: argparse.Namespace) -> list[ItemDraws]:
    """The train/dev draws, replayed from the bank once and kept in --draws (a second run reads them back)."""
    known = {}
    if args.draws.exists():
        known = {d.key: d for d in map(draws_from_json, args.draws.read_text().splitlines())}
    limits = {s: args.choice_items if s.split(":")[0] in CHOICE_BENCHES else args.number_items for s in TRAIN_SPLITS}
    limits["multiarith:train"] = min(limits["multiarith:train"], args.multiarith_items)
    with ResultsStore(args.store, read_only=True) as store:
        items = asyncio.run(collect(store, list(TRAIN_SPLITS), known, limits=limits, seeds=1))
    write_output(args.draws, "".join(draws_to_json(d) + "\n" for d in items), what="the draws",
                 fix="pass --draws another path")
    counts = Counter(bench_of(d.key) for d in items)
    short = {s: (counts[s.split(":")[0]], n) for s, n in limits.items() if counts[s.split(":")[0]] < n}
    if short:  # said, not hidden: the rows are then over fewer pairs than asked
        log.warning("not all asked pairs are banked (found, asked): %s; runtime_bank.sh train draws them", short)
    return items


def check_sizes(args: argparse.Namespace) -> None:
    """One line naming a size out of range (exit 2), not a traceback deep in the replay."""
    least = {"--folds": (args.folds, 2), "--orders": (args.orders, 1), "--number-items": (args.number_items, 1),
             "--multiarith-items": (args.multiarith_items, 1), "--choice-items": (args.choice_items, 1)}
    for option, (value, low) in least.items():
        if value < low:
            raise LemonError(f"{option} {value}: give at least {low}")
    if args.price < 0 or args.spec_tokens < 0:
        raise LemonError("--price and --spec-tokens are costs: give a value >= 0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=lemon_home() / "runtime-bank.sqlite")
    ap.add_argument("--draws", type=Path, default=lemon_home() / "policy-ceiling-draws.jsonl")
    ap.add_argument("--number-items", type=int, default=40, help="the first N `train` items of each number split")
    ap.add_argument("--multiarith-items", type=int, default=20, help="at most N of MultiArith's (its bank's size)")
    ap.add_argument("--choice-items", type=int, default=20, help="the first N `dev` items of AQuA and MMLU")
    ap.add_argument("--orders", type=int, default=24)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--price", type=float, default=0.05, help="the learned rule's token price (its packaged one)")
    ap.add_argument("--spec-tokens", type=float, default=72.0, help="a written team (a `copies` block: ~250 chars)")
    args = ap.parse_args()
    check_sizes(args)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    items = load_items(args)
    print("\n".join(report(outcomes(items, args), items, args)))


if __name__ == "__main__":
    run_script(main)
