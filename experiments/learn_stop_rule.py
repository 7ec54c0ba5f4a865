"""Learn the stop rule of the issue "Learn the decisions that pay on this pool" from the sample bank, and say how it
does against the fixed stop rules on items it was not fit on.

1. Draws: for every (item, seed) the bank holds on each split named, the 5 prose voters (sc-cot) and, on number
   benchmarks, the 5 program voters (sc-pot) are replayed through the real Executor on an OFFLINE pool (no model
   call; a draw the bank lacks is an error) and kept as `ItemDraws`: each voter's answer (the benchmark's own
   extractor), whether it is right (its grader), its reply's log-probability (read from the generation, or the
   banked teacher-forced score of an older draw; None where the bank has neither), its tokens, and whether it
   was cut at the reply limit. Kept in --draws (JSON lines), so a second run reads them back.
2. Fit: `lemon.train.stop_learning.learn_policy` (P(leader right | moment), then two thresholds for --price).
3. Report: 5-fold cross-validation by item over the training draws: the learned rule against esc (agree 2 of
   5), asc (confidence 0.95), the 5-vote, and the program cross-check (a prose voter, then a program voter;
   stop if they agree, else esc over the rest) -- accuracy and tokens, expected over --orders draw orders.
   Then the rule fit on every training draw of each answer kind is written to --out/KIND.json (by default the
   packaged policies: `stop: {learned: number}` reads src/lemon/spec/stops/policies/number.json).

Usage: LEMON_DATA_DIR=../shared/data python experiments/learn_stop_rule.py [--store S] [--draws F]
       [--splits gsm8k:train svamp:train ...] [--price 0.05 | --budget 0.38] [--opening prose|program]
       [--suffix NAME] [--orders 8] [--out DIR] [--collect-only] [--score] [--pool cpu]
--budget: thresholds for the most accuracy at that share of the 5-vote's tokens (a claim at a budget) instead of a
price; --opening program: every run opens with a program voter (where the benchmark has them); a variant is
written as KIND-SUFFIX.json, never over the packaged KIND.json.
--score: prose replies banked before replies carried their log-probability (AQuA and MMLU `dev`) are scored first,
one teacher-forced pass each on the `cpu` pool's model, and the scores banked (`score_voters`).
Rebuild the packaged policies: python experiments/learn_stop_rule.py (after experiments/runtime_bank.sh train).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.errors import LemonError, run_script
from lemon.evaluation.bank import bank_keys, bank_params, vote_team
from lemon.evaluation.baselines import baseline_spec
from lemon.evaluation.item import item_seed
from lemon.evaluation.store import ResultsStore
from lemon.files import write_output
from lemon.llm.pools import load_pool
from lemon.paths import ensure_dir, lemon_home
from lemon.runtime import Executor
from lemon.spec.model import StopRule
from lemon.spec.roles import RoleLibrary
from lemon.spec.stops.policy import POLICIES, Moment, Reply
from lemon.train.stop_learning import Draw, ItemDraws, Objective, Opening, evaluate, fold_split, learn_policy

log = logging.getLogger("learn_stop_rule")
TRAIN_SPLITS = ("gsm8k:train", "svamp:train", "multiarith:train", "aqua:dev", "mmlu:dev")


async def replay_voters(executor: Executor, method: str, bench: str, item: object, run_seed: int,
                        max_tokens: int) -> tuple[Draw, ...]:
    """The method's 5 voters on one item, from the bank: each as a `Draw`."""
    task = get_benchmark(bench)
    spec = baseline_spec(method, task.kind, level="large", n=5)
    result = await executor.run(spec, task.prompt(item), seed=run_seed,  # type: ignore[arg-type]
                                vote_key=lambda text: task.extract(text, item))  # type: ignore[arg-type]
    if result.status != "ok":
        raise LemonError(f"{bench} {item.id}: {method} is not fully banked ({result.stop_reason}); "  # type: ignore
                         "run experiments/runtime_bank.sh first")
    returns = {e["agent"]: e for e in result.trace.events if e["type"] == "return"}
    draws = []
    for name in [a.name for a in spec.agents if a.name != "vote"]:
        answer = task.extract(result.outputs[name], item)  # type: ignore[arg-type]
        ev = returns[name]
        reply = Reply(method == "sc-pot", answer, ev.get("logprob"), int(ev["completion_tokens"]),
                      int(ev["completion_tokens"]) >= max_tokens)
        draws.append(Draw(reply, answer is not None and bool(task.check(answer, item)),  # type: ignore[arg-type]
                          int(ev["prompt_tokens"]) + int(ev["completion_tokens"])))
    return tuple(draws)


async def score_voters(executor: Executor, bench: str, item: object, run_seed: int) -> None:
    """Bank a log-probability for each of the item's 5 prose voters that has none (drawn before replies carried
    them): the same voters behind a gate no reply passes (`stop: {logprob: -1}`), so every reply is scored by
    one teacher-forced pass on an online pool and the LLM cache keeps the score (the replies themselves are
    cache hits). Such a score is within 1-3 % of the generation's own (docs/notebook/2026-11-29.md)."""
    task = get_benchmark(bench)
    spec = vote_team(task.kind, "large", 5, StopRule(logprob=-1))
    await executor.run(spec, task.prompt(item), seed=run_seed,  # type: ignore[arg-type]
                       vote_key=lambda text: task.extract(text, item))  # type: ignore[arg-type]


async def collect(store: ResultsStore, splits: list[str], known: dict[str, ItemDraws], score: bool = False,
                  pool_name: str = "cpu", *, limits: dict[str, int] | None = None,
                  seeds: int | None = None) -> list[ItemDraws]:
    """Every banked (item, seed) of `splits` as ItemDraws (those in `known` are not replayed again), of each
    split's first `limits[split]` items and seeds below `seeds` where given, replayed on `pool_name` offline;
    with `score`, prose voters without a log-probability are scored first (`score_voters`)."""
    pool, roles = load_pool(pool_name, offline=True), RoleLibrary.load()
    online = load_pool(pool_name) if score else None
    out = []
    for bench_split in splits:
        bench, split = bench_split.split(":")
        task = get_benchmark(bench)
        keys, config = bank_keys(store, bench, "large", seeds, split)
        params = bank_params(pool, config)
        executor, max_tokens = Executor(pool, roles, params=params), params.max_tokens
        scorer = Executor(online, roles, params=params) if online is not None else None
        items = {str(i.id): i for i in load_split(bench, split)[:(limits or {}).get(bench_split)]}
        for item_id, seed in sorted(k for k in keys if k[0] in items):
            key = f"{item_id}@{seed}"
            if key in known:
                out.append(known[key])
                continue
            run_seed = item_seed(bench, items[item_id].id, seed)
            try:
                prose = await replay_voters(executor, "sc-cot", bench, items[item_id], run_seed, max_tokens)
                if scorer is not None and any(d.reply.logprob is None for d in prose):
                    await score_voters(scorer, bench, items[item_id], run_seed)
                    prose = await replay_voters(executor, "sc-cot", bench, items[item_id], run_seed, max_tokens)
                programs = await replay_voters(executor, "sc-pot", bench, items[item_id], run_seed, max_tokens) \
                    if task.kind == "number" else ()
            except LemonError as exc:  # not banked yet (the bank grows in the background): left for next time
                log.info("skipped %s: %s", key, exc)
                continue
            out.append(ItemDraws(key, task.kind, len(task.prompt(items[item_id])), prose, programs))
    return out


def draws_to_json(d: ItemDraws) -> str:
    def one(x: Draw) -> list[object]:
        r = x.reply
        return [r.program, r.answer, r.logprob, r.tokens, r.cut, x.right, x.tokens]
    return json.dumps({"key": d.key, "kind": d.task_kind, "chars": d.task_chars,
                       "prose": [one(x) for x in d.prose], "programs": [one(x) for x in d.programs]})


def draws_from_json(line: str) -> ItemDraws:
    data = json.loads(line)

    def one(v: list) -> Draw:  # type: ignore[type-arg]
        return Draw(Reply(bool(v[0]), v[1], v[2], int(v[3]), bool(v[4])), bool(v[5]), int(v[6]))
    return ItemDraws(data["key"], data["kind"], int(data["chars"]), tuple(one(v) for v in data["prose"]),
                     tuple(one(v) for v in data["programs"]))


def fixed_rules() -> dict[str, tuple[object, Opening]]:
    """The fixed stop rules, restated over moments for the cross-validated comparison on training items, each
    with the voter its runs open with."""
    def esc(m: Moment) -> str:
        return "stop" if m.leader_votes() >= 2 or not m.prose_left else "prose"

    beta = StopRule(confidence=0.95)

    def asc(m: Moment) -> str:  # Adaptive-Consistency's Beta criterion at 0.95, the runtime's own criterion
        answers = [r.answer for r in m.replies]
        fired = len(answers) >= 2 and beta.fires(answers)
        return "stop" if fired or not m.prose_left else "prose"

    def vote5(m: Moment) -> str:
        return "prose" if m.prose_left else "stop"

    def cross_check(m: Moment) -> str:  # a prose voter, then a program voter, then esc over prose voters
        if len(m.replies) == 1 and m.programs_left:
            return "verify"
        return esc(m)

    def program_esc(m: Moment) -> str:  # program voters first, agree 2; prose voters once none is left
        return "stop" if m.leader_votes() >= 2 or not (m.prose_left or m.programs_left) else "verify"

    def programs_only(m: Moment) -> str:  # program voters only, agree 2 (a choice has none: esc over prose)
        if m.leader_votes() >= 2 or not (m.programs_left or (m.prose_left and not m.replies[0].program)):
            return "stop"
        return "verify"

    return {"5-vote": (vote5, "prose"), "esc (agree 2)": (esc, "prose"), "asc (0.95)": (asc, "prose"),
            "program cross-check": (cross_check, "prose"), "program esc (programs first, agree 2)":
            (program_esc, "program"), "program esc (programs only, agree 2)": (programs_only, "program")}


def written(opening: Opening) -> Opening | None:
    """The policy's own opening: none (format 1, the judged team writes its prose voters first) for prose."""
    return None if opening == "prose" else opening


def summary(name: str, outcomes: dict[str, object]) -> str:
    values = list(outcomes.values())
    acc = statistics.mean(o.right for o in values) * 100  # type: ignore[attr-defined]
    tokens = statistics.mean(o.tokens for o in values)  # type: ignore[attr-defined]
    voters = statistics.mean(o.voters for o in values)  # type: ignore[attr-defined]
    return f"| {name} | {acc:.1f} % | {tokens:,.0f} | {voters:.2f} |"


def cross_validate(items: list[ItemDraws], folds: int, orders: int, price: float,
                   shown: Callable[[ItemDraws], ItemDraws] = lambda d: d, *, budget: float | None = None,
                   opening: Opening = "prose") -> dict[str, dict[str, object]]:
    """Per rule, each item's outcome when the learned rule was fit without the item's fold (folds by item, so
    the seeds of one item stay together). The learned rule decides on `shown(item)` (e.g. its replies without
    their log-probabilities: a pool that cannot score them), fit on the items as banked: for `price`, or, with
    `budget`, for the most accuracy at that share of the 5-vote's tokens on the fold's training items."""
    results: dict[str, dict[str, object]] = {name: {} for name in [*fixed_rules(), "learned"]}
    for f in range(folds):
        train, test = fold_split(items, folds, f)
        objective = fit_objective(train, orders, price, budget)
        policy = learn_policy("cv", train, orders=orders, objective=objective, opening=written(opening))
        results["learned"] |= evaluate(lambda m, p=policy: p.decide(m)[0], [shown(d) for d in test], orders,
                                       opening)
        log.info("fold %d: stop_at %.2f verify_at %.2f", f, policy.stop_at, policy.verify_at)
    for name, (rule, opens) in fixed_rules().items():
        results[name] = evaluate(rule, items, orders, opens)  # type: ignore[assignment]
    return results


def fit_objective(items: list[ItemDraws], orders: int, price: float, budget: float | None) -> Objective:
    """A price, or a cap at `budget` x the 5-vote's mean tokens on `items` (what a claim at a budget reads)."""
    if budget is None:
        return Objective(price)
    vote5 = evaluate(fixed_rules()["5-vote"][0], items, orders)
    return Objective(price, budget * statistics.mean(o.tokens for o in vote5.values()))


def learn_kind(kind: str, items: list[ItemDraws], args: argparse.Namespace) -> None:
    """Cross-validate, then fit on every draw of `kind` and write its packaged policy (`policies/KIND.json`)."""
    results = cross_validate(items, args.folds, args.orders, args.price, budget=args.budget, opening=args.opening)
    fit = f"budget {args.budget} of the 5-vote's tokens" if args.budget is not None else f"price {args.price}"
    lines = [f"{kind}: cross-validated on training draws ({len(items)} pairs, {args.orders} orders, {fit}, "
             f"runs open with a {args.opening} voter):", "| rule | accuracy | tokens | voters |", "|---|---|---|---|"]
    lines += [summary(name, outcomes) for name, outcomes in results.items()]
    log.info("\n".join(lines))
    name = f"{kind}-{args.suffix}" if args.suffix else kind
    objective = fit_objective(items, args.orders, args.price, args.budget)
    policy = learn_policy(name, items, orders=args.orders, objective=objective, opening=written(args.opening))
    out = args.out / f"{name}.json"
    data = policy.to_json() | {"trained_on": {"splits": args.splits, "pairs": len(items), "orders": args.orders,
                                              "price": args.price, "folds": args.folds}}
    if args.budget is not None or args.opening != "prose":  # the packaged files' bytes stay as they were
        data["trained_on"] |= {"budget": args.budget, "opening": args.opening}
    write_output(out, json.dumps(data, indent=1) + "\n", what="the policy", fix="pass --out another folder")
    log.info("wrote %s (stop_at %.2f, verify_at %.2f)", out, policy.stop_at, policy.verify_at)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", type=Path, default=lemon_home() / "runtime-bank.sqlite")
    ap.add_argument("--draws", type=Path, default=lemon_home() / "runtime-draws.jsonl")
    ap.add_argument("--splits", nargs="+", default=list(TRAIN_SPLITS))
    ap.add_argument("--price", type=float, default=0.05)
    ap.add_argument("--orders", type=int, default=8)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=POLICIES, help="folder of the policies (one file per answer kind)")
    ap.add_argument("--budget", type=float, help="fit for the most accuracy at this share of the 5-vote's tokens "
                    "(e.g. 0.38) instead of --price")
    ap.add_argument("--opening", choices=["prose", "program"], default="prose",
                    help="the voter every run opens with (program: where the benchmark has program voters)")
    ap.add_argument("--suffix", default="", help="write KIND-SUFFIX.json (a variant beside the packaged KIND.json)")
    ap.add_argument("--pool", default="cpu", help="the pool the bank was drawn on (its `large` level)")
    ap.add_argument("--collect-only", action="store_true")
    ap.add_argument("--score", action="store_true",
                    help="score prose replies banked without a log-probability (one teacher-forced pass each)")
    args = ap.parse_args()
    variant = args.budget is not None or args.opening != "prose"
    if variant and not args.suffix and args.out.resolve() == POLICIES.resolve():
        raise LemonError("--budget or --opening program would overwrite the packaged policies; name the variant "
                         "with --suffix (KIND-SUFFIX.json) or write elsewhere with --out")
    if args.budget is not None and not 0 < args.budget <= 1:
        raise LemonError(f"--budget {args.budget}: give a share of the 5-vote's tokens in (0, 1], e.g. 0.38")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for folder, what in ((args.out, "the policies"), (args.draws.parent, "the draws")):
        ensure_dir(folder, what)  # found before the replay and the fit are paid for, not after
    known = {}
    if args.draws.is_file():
        known = {d.key: d for d in map(draws_from_json, args.draws.read_text().splitlines())}
    items = asyncio.run(collect(ResultsStore(args.store), args.splits, known, args.score, args.pool))
    write_output(args.draws, "".join(draws_to_json(d) + "\n" for d in items), what="the draws",
                 fix="pass --draws another path")
    log.info("%d (item, seed) pairs: %s", len(items), dict(Counter(d.key.split("/")[0] for d in items)))
    if not args.collect_only:
        for kind in sorted({d.task_kind for d in items}):
            learn_kind(kind, [d for d in items if d.task_kind == kind], args)


if __name__ == "__main__":
    run_script(main)
