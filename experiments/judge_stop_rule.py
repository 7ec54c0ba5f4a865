"""The learned stop rule against every fixed rule at matched tokens on the test banks (issue 54): the comparison as
registered before any test item was looked at. This docstring is the registration; nothing in it is chosen after.

ITEMS (`--split test`, the default): GSM8K and SVAMP `test` items 1-150 (the split's first 150, in the data's
order) x seeds 0 and 1, AQuA `test` and MMLU `val` (its evaluation split) items 1-60 x seeds 0 and 1: 840 (item,
seed) pairs, pooled. A pair counts when the bank (the store's 5-voter sc-cot runs, `--store`, and the LLM cache
of `--pool`, offline) answers EVERY rule the verdicts name on it (the packaged learned rule, the 5-vote, every esc
point, every gate point); fewer than 840 such pairs: every verdict is INCOMPLETE, and no accuracy or token number
is printed unless `--show-partial` is given (so nobody peeks by accident).

THE RULE JUDGED: the packaged policy of each answer kind as committed, `stop: {learned: number}` on GSM8K and
SVAMP (five prose voters, sc-cot's, and five program voters, sc-pot's, in that written order, and a vote the
policy stops: the policy runs the next prose voter or verifies with the next program voter),
`stop: {learned: choice}` on AQuA and MMLU (five prose voters; no program voter answers a letter). It runs on the
real Executor over an offline pool, as `lemon eval` would run it, and its worker tokens are what it pays. A kind
without a packaged policy has no learned pairs (INCOMPLETE, the policy named).

THE SECOND RULE JUDGED (registered 2026-11-29 by an amendment, before the test banks were complete; see "what was
seen" below): the trial policies as committed, `stop: {learned: number-budget}` on GSM8K and SVAMP and
`stop: {learned: choice-budget}` on AQuA and MMLU (src/lemon/spec/stops/policies/trial/, format 2: each names
its opening voter and an agreement floor), on the same team in the same written order, run on the Executor the
same way. They were fit by experiments/learn_stop_budget.py on the judged benchmarks' training splits only
(GSM8K, SVAMP `train`, AQuA, MMLU `dev`, the bank's first 40 items x seed 0), for the most accuracy at 39 % of
the 5-vote's tokens pooled as the verdicts pool them (600 number pairs, 240 choice pairs). The files judged are
pinned by content (REGISTERED_TRIAL: each file's sha256 as registered); a trial file that differs gets VOID
verdicts. Every verdict below is computed for each rule on the same counted pairs (the pairs both rules and every
named baseline answered); with two rules judged, each (b) test is at p < 0.025 (Bonferroni; the amendment halved
the first rule's level too), and the issue's acceptance holds if either rule passes (a) and (b). What was seen of
`test` items before the amendment: no draw was read by any design script; the bank's progress bar printed the
5-vote's running accuracy on SVAMP `test` items 1-43 (seed 0) in an earlier session's log.

ITS CURVE: policies fit in memory on the TRAIN banks (every pair the bank holds of `learn_stop_rule.TRAIN_SPLITS`
of the kind: GSM8K, SVAMP, MultiArith `train` for numbers; AQuA and MMLU `dev` for choices) by
`stop_learning.learn_policy` over 8 draw orders, at each price of PRICES (0.01, 0.02, 0.05, 0.1, 0.2 accuracy per
1,000 tokens), each run on the test pairs by the exact pure replay (`stop_learning.evaluate`, one order: the
written one, which is the order the Executor runs the team in). `learned: NAME` reads packaged files only, so the
sweep is not run through the Executor; the script checks on every pair that the pure replay of the PACKAGED
policy gives the Executor's answer and tokens, and prints how many agree (all should).

THE BASELINES' CURVES: `stop_curves.rules()`, each threshold sweep on the same pairs through the Executor: CoT-SC
(k-vote, k = 1..5), esc (agree k of 5, k = 2..4), asc (Beta >= c), the gate (logprob >= t, then agree 2), cges
(posterior >= c), the program cross-check (numbers).

TOKENS: every worker token (prompt and completion) of every agent that ran, the vote none. A log-probability read
from the generation costs none. Where a reply's log-probability exists only as a banked teacher-forced score (its
draw is in the bank as committed before generations carried one: `experiments/bank/cpu.jsonl.gz` at the parent of
commit f515b98), it is counted as no tokens, and the share of such replies is printed. A reply with none is seen as
None by the learned rule, as at run time; an offline replay cannot score it, so a gate point needing its score
leaves the pair out (INCOMPLETE until it is scored and banked).

VERDICTS, all over the same counted pairs, pooled (means over the pairs):
(a) PASS iff the learned rule's accuracy >= the 5-vote's - 1 point AND its mean worker tokens <= 40 % of the
    5-vote's; else FAIL.
(b) For esc, and separately the gate: the most accurate point of its curve (ties: the cheaper) whose mean tokens
    are <= the learned rule's mean tokens x 1.05; if none, its cheapest point, flagged. Exact McNemar over the
    pairs (wins: learned right and the point wrong; losses: the reverse): PASS iff p < 0.05 AND wins > losses.
    (b) passes iff both esc and the gate pass. (p < 0.025 since the amendment: two rules are judged.)

`--split train` is the design check on training items (GSM8K, SVAMP, MultiArith `train` 1-20 and AQuA, MMLU `dev`
1-20, seed 0: 100 pairs); there the sweep is fit on the items it is run on (in-sample), and the verdicts mean
nothing but that the code runs.

Usage: LEMON_DATA_DIR=../shared/data python experiments/judge_stop_rule.py [--split test|train] [--store S]
       [--pool cpu] [--show-partial] [--drawn-before BANK.jsonl.gz]
The store is only read; the LLM cache is the pool's own.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import logging
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from learn_stop_rule import TRAIN_SPLITS, collect
from stop_curves import COT_SC, Curve, Key, Rule, best_at_or_below, families, points_table, replay, rules

from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.errors import LemonError, run_script
from lemon.evaluation.bank import bank_keys, bank_params
from lemon.evaluation.baselines import baseline_spec, supports
from lemon.evaluation.item import item_seed
from lemon.evaluation.mcnemar import mcnemar_exact
from lemon.evaluation.store import ResultsStore
from lemon.files import read_regular
from lemon.llm.base import request_key
from lemon.llm.pools import load_pool
from lemon.paths import lemon_home
from lemon.runtime import Executor
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.roles import RoleLibrary
from lemon.spec.stops.policy import policy_names, trial_names
from lemon.train.stop_learning import Draw, ItemDraws, Objective, evaluate, learn_policy

log = logging.getLogger("judge_stop_rule")
ROOT = Path(__file__).parents[1]
LEVEL = "large"
PRICES = (0.01, 0.02, 0.05, 0.1, 0.2)
ORDERS = 8  # draw orders the sweep's policies are fit over (learn_stop_rule's)
WITHIN_POINTS = 1.0
TOKEN_SHARE = 0.40
EQUAL_TOKENS = 1.05
ALPHA = 0.05
FIVE_VOTE = "k=5"
ESC = "esc (agree k of 5)"
GATE = "gate (logprob >= t, agree 2)"
LEARNED = "learned (packaged policy, run)"
SWEEP = "learned (fit on train at a price, replayed)"
TRIAL_RULE = "learned, budget (trial policy, run)"
TRIAL_SUFFIX = "budget"
#: Two rules are judged: each (b) test at half the level (Bonferroni), so either passing means what one would.
RULES_JUDGED = 2
#: The trial files judged, by content (sha256 of each file's bytes), registered with the amendment: a trial file
#: that differs is not the rule registered, and its verdicts say VOID instead of PASS or FAIL.
REGISTERED_TRIAL = {
    "choice-budget": "00917b0c395b90863d5d88118f1f336be313ac5576c5a445d3e67e71b2d3a3ea",
    "number-budget": "000475e4f8efe935d9e2be2e3e1a7f63dfe785b820a29491561201f034d956d3",
}
#: Generations carry their log-probability from this commit on; the bank as committed before it is older draws.
RECORDER = "f515b98"
MAX_BANK_BYTES = 64 << 20


@dataclass(frozen=True)
class Design:
    """The pairs judged: per benchmark its split and first items, and the seeds."""

    items: dict[str, tuple[str, int]]
    seeds: int

    @property
    def required(self) -> int:
        return sum(n for _, n in self.items.values()) * self.seeds

    def limits(self) -> dict[str, int]:
        """Each `benchmark:split` and its first items."""
        return {f"{b}:{split}": n for b, (split, n) in self.items.items()}


DESIGNS = {
    "test": Design({"gsm8k": ("test", 150), "svamp": ("test", 150), "aqua": ("test", 60), "mmlu": ("val", 60)}, 2),
    "train": Design({"gsm8k": ("train", 20), "svamp": ("train", 20), "multiarith": ("train", 20),
                     "aqua": ("dev", 20), "mmlu": ("dev", 20)}, 1),
}


def learned_team(kind: str, level: str, policy: str | None = None) -> Spec:
    """The judged team: sc-cot's five prose voters, sc-pot's five program voters where the kind has them, in that
    written order, and a vote the packaged policy `policy` (by default the kind's own) stops
    (`stop: {learned: NAME}`)."""
    voters = baseline_spec("sc-cot", kind, level=level, n=5).agents[:-1]
    if supports("sc-pot", kind):
        voters += baseline_spec("sc-pot", kind, level=level, n=5).agents[:-1]
    vote = Agent(name="vote", role="majority_vote", capacity=level, depends_on=tuple(a.name for a in voters),
                 stop=StopRule(learned=policy or kind))
    return Spec(agents=(*voters, vote), output="vote")


def learned_rule() -> Rule:
    """The packaged policies as a rule of the curves, on the kinds that have one."""
    kinds = tuple(k for k in ("number", "choice") if k in policy_names())
    return Rule(LEARNED, "as committed", learned_team, kinds=kinds)


def trial_rule() -> Rule:
    """The second rule judged: the trial policies `KIND-budget` (format 2), on the kinds that have one."""
    kinds = tuple(k for k in ("number", "choice") if f"{k}-{TRIAL_SUFFIX}" in trial_names())
    return Rule(TRIAL_RULE, "as committed", lambda kind, level: learned_team(kind, level, f"{kind}-{TRIAL_SUFFIX}"),
                kinds=kinds)


# ---- the verdicts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    name: str
    outcome: str  # PASS, FAIL or INCOMPLETE
    detail: str

    def line(self, show: bool) -> str:
        return f"{self.name}: {self.outcome}" + (f" ({self.detail})" if show or self.outcome != "INCOMPLETE" else "")


def _ahead(name: str, points: list[tuple[str, Curve]], learned: Curve) -> Verdict:
    """(b) against one family: its best point at or below the learned rule's tokens x EQUAL_TOKENS (or, flagged,
    its cheapest), exact McNemar over the pairs."""
    budget = learned.mean_tokens() * EQUAL_TOKENS
    best = best_at_or_below(points, budget)
    flag = "" if best else f", FLAGGED: no point at or below {budget:.0f} tokens, its cheapest taken"
    threshold, point = best or min(points, key=lambda p: p[1].mean_tokens())
    keys = learned.correct.keys() & point.correct.keys()
    wins = sum(learned.correct[k] and not point.correct[k] for k in keys)
    losses = sum(point.correct[k] and not learned.correct[k] for k in keys)
    p = mcnemar_exact(wins, losses)
    outcome = "PASS" if p < ALPHA / RULES_JUDGED and wins > losses else "FAIL"
    return Verdict(f"(b) ahead of {name} at equal tokens", outcome,
                   f"learned {learned.accuracy():.1f} % at {learned.mean_tokens():.0f} tokens against {name} "
                   f"{threshold} {point.accuracy():.1f} % at {point.mean_tokens():.0f}{flag}; {wins} wins / "
                   f"{losses} losses of {len(keys)} pairs, p = {p:.2g}")


def verdicts(fams: dict[str, list[tuple[str, Curve]]], learned: Curve, required: int,
             who: str = LEARNED) -> list[Verdict]:
    """The registered verdicts of the rule `who` over `learned`'s pairs (every curve restricted to the same pairs):
    INCOMPLETE below `required` pairs."""
    return [Verdict(f"{who}: {v.name}", v.outcome, v.detail) for v in _verdicts(fams, learned, required)]


def _verdicts(fams: dict[str, list[tuple[str, Curve]]], learned: Curve, required: int) -> list[Verdict]:
    pairs = len(learned.correct)
    if pairs < required:
        why = f"{pairs} of {required} pairs counted"
        return [Verdict(n, "INCOMPLETE", why) for n in ("(a) the 5-vote's accuracy within 1 point at <= 40 % "
                                                        "of its tokens", "(b) ahead of esc and of the gate")]
    five = dict(fams[COT_SC])[FIVE_VOTE]
    gap, share = learned.accuracy() - five.accuracy(), learned.mean_tokens() / five.mean_tokens()
    ok = gap >= -WITHIN_POINTS - 1e-9 and share <= TOKEN_SHARE + 1e-12
    a = Verdict("(a) the 5-vote's accuracy within 1 point at <= 40 % of its tokens", "PASS" if ok else "FAIL",
                f"learned {learned.accuracy():.1f} % at {learned.mean_tokens():.0f} tokens, the 5-vote "
                f"{five.accuracy():.1f} % at {five.mean_tokens():.0f}: {gap:+.1f} points at {100 * share:.1f} % "
                f"of its tokens, {pairs} pairs")
    each = [_ahead(name, fams[family], learned) for name, family in (("esc", ESC), ("the gate", GATE))]
    both = "PASS" if all(v.outcome == "PASS" for v in each) else "FAIL"
    return [a, Verdict("(b) ahead of esc and of the gate", both, f"{pairs} pairs"), *each]


# ---- the curves ---------------------------------------------------------------------------------------


def draw_key(d: ItemDraws) -> Key:
    item, seed = d.key.rsplit("@", 1)
    return item.split("/")[0], item, int(seed)


def replayed(outcomes: dict[str, object], draws: list[ItemDraws]) -> Curve:
    """Outcomes of one written order (`evaluate` with orders=1) as a curve."""
    by_key = {d.key: draw_key(d) for d in draws}
    out = Curve()
    for key, o in outcomes.items():
        out.correct[by_key[key]] = o.right == 1.0  # type: ignore[attr-defined]
        out.tokens[by_key[key]] = round(o.tokens)  # type: ignore[attr-defined]
        out.voters[by_key[key]] = round(o.voters)  # type: ignore[attr-defined]
    return out


def sweep(train: list[ItemDraws], test: list[ItemDraws]) -> list[tuple[str, Curve]]:
    """The learned rule's curve: per price, each kind's policy fit on its train draws, replayed on its test
    draws in the written order; a kind without train draws has no points."""
    points = []
    for price in PRICES:
        curve = Curve()
        for kind in sorted({d.task_kind for d in test}):
            fit_on = [d for d in train if d.task_kind == kind]
            if not fit_on:
                continue
            policy = learn_policy(kind, fit_on, orders=ORDERS, objective=Objective(price))
            judged = [d for d in test if d.task_kind == kind]
            part = replayed(evaluate(lambda m, p=policy: p.decide(m)[0], judged, 1), judged)
            for mine, theirs in zip((curve.correct, curve.tokens, curve.voters),
                                    (part.correct, part.tokens, part.voters), strict=True):
                mine.update(theirs)  # type: ignore[attr-defined]
            log.info("%s at price %s: stop_at %.2f verify_at %.2f", kind, price, policy.stop_at, policy.verify_at)
        if curve.correct:
            points.append((f"price={price}", curve))
    return points


def packaged_agreement(test: list[ItemDraws], run: Curve, suffix: str = "") -> tuple[int, int]:
    """On how many pairs the pure replay of the packaged policy (`KIND` + `suffix`) gives the Executor's answer
    and tokens."""
    from lemon.spec.stops.policy import packaged_policy

    agree = total = 0
    names = {*policy_names(), *trial_names()}
    for kind in sorted(k for k in {d.task_kind for d in test} if k + suffix in names):
        policy = packaged_policy(kind + suffix)
        judged = [d for d in test if d.task_kind == kind and draw_key(d) in run.correct]
        pure = replayed(evaluate(lambda m, p=policy: p.decide(m)[0], judged, 1, policy.opening or "prose"), judged)
        total += len(pure.correct)
        agree += sum(pure.correct[k] == run.correct[k] and pure.tokens[k] == run.tokens[k] for k in pure.correct)
    return agree, total


# ---- where each reply's log-probability comes from ----------------------------------------------------


def drawn_before(path: Path | None) -> set[str]:
    """The request keys of the draws in the bank as committed before generations carried their log-probability
    (`path`, else `git show RECORDER^:experiments/bank/cpu.jsonl.gz`)."""
    if path is not None:
        raw = read_regular(path, limit=MAX_BANK_BYTES, what="bank export")
    else:
        done = subprocess.run(["git", "show", f"{RECORDER}^:experiments/bank/cpu.jsonl.gz"], cwd=ROOT,
                              capture_output=True, check=False)
        if done.returncode != 0:
            raise LemonError(f"cannot read the bank as committed before {RECORDER} from git here; give "
                             "--drawn-before FILE (that export)")
        raw = done.stdout
    try:
        lines = gzip.decompress(raw).decode("utf-8").splitlines()
        return {json.loads(line)["completion"][0] for line in lines[1:] if line.startswith('{"completion"')}
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise LemonError(f"the bank export before {RECORDER} is not a LEMON cache export ({exc}); give "
                         "--drawn-before FILE") from None


def sources(store: ResultsStore, design: Design, draws: list[ItemDraws], pool_name: str,
            before: set[str]) -> Counter[str]:
    """Each banked reply of `draws` by where its log-probability comes from: `generation`, `teacher-forced`
    (drawn before generations carried one: a banked score) or `none`; prose (sc-cot) and program (sc-pot) apart."""
    pool, roles = load_pool(pool_name, offline=True), RoleLibrary.load()
    by_key = {d.key: d for d in draws}
    out: Counter[str] = Counter()
    for bench, (split, limit) in design.items.items():
        task = get_benchmark(bench)
        if not any(k.startswith(f"{bench}/") for k in by_key):
            continue
        _, config = bank_keys(store, bench, LEVEL, design.seeds, split)
        executor = Executor(pool, roles, params=bank_params(pool, config))  # the bank's requests, not run
        teams = [(m, baseline_spec(m, task.kind, level=LEVEL, n=5)) for m in ("sc-cot", "sc-pot")
                 if supports(m, task.kind)]
        for item in load_split(bench, split)[:limit]:
            for seed in range(design.seeds):
                found = by_key.get(f"{item.id}@{seed}")
                if found is None:
                    continue
                for method, spec in teams:
                    replies = found.prose if method == "sc-cot" else found.programs
                    for agent, draw in zip(spec.agents[:-1], replies, strict=True):
                        out[f"{method} {_source(executor, spec, agent, bench, item, seed, draw, before)}"] += 1
    return out


def _source(executor: Executor, spec: Spec, agent: Agent, bench: str, item: object, seed: int, draw: Draw,
            before: set[str]) -> str:
    if draw.reply.logprob is None:
        return "none"
    run_seed = item_seed(bench, item.id, seed)  # type: ignore[attr-defined]
    request = executor.request(agent, get_benchmark(bench).prompt(item), {}, spec, run_seed)  # type: ignore[arg-type]
    model = executor.pool.backend(agent.capacity).model_id
    return "teacher-forced" if request_key(model, request) in before else "generation"


# ---- the run ------------------------------------------------------------------------------------------


@dataclass
class Judged:
    """Everything the report prints: the curves on the counted pairs, the draws' sources, the checks."""

    fams: dict[str, list[tuple[str, Curve]]]
    learned: Curve
    trial: Curve
    counted: set[Key]
    sources: Counter[str]
    agreement: tuple[int, int]
    trial_agreement: tuple[int, int]
    fit_on: Counter[str]  # train pairs the sweep's policies were fit on, per answer kind


async def run_curves(store: ResultsStore, design: Design, pool: str) -> dict[str, Curve]:
    """Every fixed rule's sweep and the packaged learned rule on the design's banked pairs, through the
    Executor offline; a rule the bank cannot answer on a pair leaves the pair out of its curve."""
    curves: dict[str, Curve] = {}
    chosen = [*rules(), learned_rule(), trial_rule()]
    for bench, (split, limit) in design.items.items():
        args = argparse.Namespace(split=split, limit=limit, seeds=design.seeds, level=LEVEL, pool=pool)
        try:
            await replay(bench, store, chosen, curves, args, tolerant=True)
        except LemonError as exc:  # no bank run of the split at all
            log.warning("%s %s: %s", bench, split, exc)
    return curves


async def draws_of(store: ResultsStore, splits: list[str], limits: dict[str, int] | None, seeds: int | None,
                   pool: str) -> list[ItemDraws]:
    """Every banked pair's 10 (or 5) draws on `splits`; a split the bank lacks gives none."""
    out: list[ItemDraws] = []
    for split in splits:
        try:
            out += await collect(store, [split], {}, limits=limits, seeds=seeds, pool_name=pool)
        except LemonError as exc:
            log.warning("%s: %s", split, exc)
    return out


def counted_pairs(fams: dict[str, list[tuple[str, Curve]]], *learned: Curve) -> set[Key]:
    """The pairs every rule the verdicts name answered: the learned rules, the 5-vote, each esc and gate point."""
    five = dict(fams.get(COT_SC, [])).get(FIVE_VOTE, Curve())
    named = [*learned, five, *(c for family in (ESC, GATE) for _, c in fams.get(family, []))]
    return set.intersection(*(set(c.correct) for c in named))


async def _bank(store: ResultsStore, design: Design, pool: str) -> tuple[dict[str, Curve], list[ItemDraws],
                                                                       list[ItemDraws]]:
    """The curves run on the design's pairs, those pairs' draws, and the train banks' draws."""
    curves = await run_curves(store, design, pool)
    test = await draws_of(store, list(design.limits()), design.limits(), design.seeds, pool)
    return curves, test, await draws_of(store, list(TRAIN_SPLITS), None, None, pool)


def judge(store: ResultsStore, design: Design, pool: str, before: set[str]) -> Judged:
    """Run everything on the design's pairs; every curve restricted to the pairs counted (`counted_pairs`)."""
    curves, test, train = asyncio.run(_bank(store, design, pool))
    rule, second = learned_rule(), trial_rule()
    fams = families([*rules(), rule, second], curves)
    learned = dict(fams.pop(LEARNED, [])).get(rule.threshold, Curve())
    trial = dict(fams.pop(TRIAL_RULE, [])).get(second.threshold, Curve())
    fams[SWEEP] = sweep(train, test)
    counted = counted_pairs(fams, learned, *([trial] if second.kinds else []))  # no trial file: the first alone
    fams = {f: [(t, c.only(counted)) for t, c in points] for f, points in fams.items()}
    test = [d for d in test if draw_key(d) in counted]
    return Judged(fams, learned.only(counted), trial.only(counted), counted,
                  sources(store, design, test, pool, before), packaged_agreement(test, learned),
                  packaged_agreement(test, trial, f"-{TRIAL_SUFFIX}"), Counter(d.task_kind for d in train))


def unregistered_trial_files() -> list[str]:
    """The trial policies whose file is missing or not the registered one (empty: every one is)."""
    from lemon.spec.stops.policy import TRIAL

    def digest(name: str) -> str | None:
        path = TRIAL / f"{name}.json"
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return [name for name, registered in REGISTERED_TRIAL.items() if digest(name) != registered]


def trial_verdicts(judged: Judged, required: int) -> list[Verdict]:
    """The second rule's verdicts, VOID where a trial file is not the registered one."""
    found = verdicts(judged.fams, judged.trial, required, TRIAL_RULE)
    if changed := unregistered_trial_files():
        why = f"{', '.join(changed)} not the file registered (REGISTERED_TRIAL)"
        return [Verdict(v.name, "VOID", why) for v in found]
    return found


def report(judged: Judged, design: Design, split: str, show: bool) -> list[str]:
    """The verdict lines, the pairs counted against the design's; the curves and the checks only when complete or
    `show`."""
    found = [*verdicts(judged.fams, judged.learned, design.required), *trial_verdicts(judged, design.required)]
    complete = found[0].outcome != "INCOMPLETE"
    lines = [f"## The learned stop rule judged on `{split}` (experiments/judge_stop_rule.py, registered design)", "",
             f"Pairs counted: {len(judged.counted)} of {design.required} "
             f"({', '.join(f'{b} {sum(k[0] == b for k in judged.counted)}' for b in design.items)}).", ""]
    lines += [v.line(show) for v in found]
    if not (complete or show):
        return [*lines, "", "Numbers withheld until every pair is banked (--show-partial prints them)."]
    bench = list(design.items)
    fams = {f: [(t, c) for t, c in points if c.correct] for f, points in judged.fams.items()}
    fams = {LEARNED: [("as committed", judged.learned)], **fams} if judged.learned.correct else fams
    fams = {TRIAL_RULE: [("as committed", judged.trial)], **fams} if judged.trial.correct else fams
    lines += ["", "### Every rule's points, pooled", "", *points_table(fams, bench)]
    for b in bench:
        mine = {f: [(t, c.only({k for k in c.correct if k[0] == b})) for t, c in points] for f, points in fams.items()}
        mine = {f: [(t, c) for t, c in points if c.correct] for f, points in mine.items()}
        if any(mine.values()):
            lines += ["", f"### {b}", "", *points_table({f: p for f, p in mine.items() if p}, [b])]
    (agree, total), (agree2, total2) = judged.agreement, judged.trial_agreement
    src = judged.sources
    lines += ["", f"The packaged policy replayed purely (written order) gives the Executor's answer and tokens on "
              f"{agree} of {total} pairs, the trial policy (its own opening) on {agree2} of {total2} (the sweep's "
              "points are replayed so; its policies were fit on "
              + ", ".join(f"{n} {kind}" for kind, n in sorted(judged.fit_on.items())) + " train pairs).",
              "Log-probabilities of the counted pairs' banked replies (no tokens counted for any): " + ", ".join(
                  f"{m} {src[f'{m} generation']} from the generation, {src[f'{m} teacher-forced']} only a banked "
                  f"teacher-forced score, {src[f'{m} none']} none" for m in ("sc-cot", "sc-pot")
                  if any(k.startswith(m) for k in src)) + "."]
    return lines


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=sorted(DESIGNS), default="test",
                    help="test: the registered comparison; train: the design check on training items")
    ap.add_argument("--store", type=Path, default=lemon_home() / "runtime-bank.sqlite",
                    help="the results store whose 5-voter sc-cot runs say which pairs are banked (read only)")
    ap.add_argument("--pool", default="cpu", help="the pool the bank was built with (its LLM cache answers)")
    ap.add_argument("--show-partial", action="store_true", help="print the numbers with fewer pairs than the design's")
    ap.add_argument("--drawn-before", type=Path,
                    help=f"the bank export before generations carried log-probabilities (default: git, {RECORDER}^)")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    if not args.store.is_file():
        raise LemonError(f"no results store at {args.store}: give --store (a store with the bank's sc-cot runs)")
    before = drawn_before(args.drawn_before)
    with ResultsStore(args.store, read_only=True) as store:
        judged = judge(store, DESIGNS[args.split], args.pool, before)
    print("\n".join(report(judged, DESIGNS[args.split], args.split, args.show_partial)))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    run_script(main)
