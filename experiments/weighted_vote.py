"""Does the model's own certainty pick the right answer among the 5-vote's replies? A confidence-weighted vote.

Why: `lemon report --replies` found that the 5-vote's majority loses 11-16 pairs a voter had right on GSM8K, AQuA
and MMLU; the free verifier (recomputing each reply's arithmetic, `arithmetic_check.py`) was a null. The next
cheapest verifier is the model's own certainty: the sum of a reply's token log-probabilities under the model that
wrote it (what the logprob gate scores; AUROC 0.85 / 0.81 of telling a right voter from a wrong one on GSM8K /
SVAMP `train`). Confidence-informed self-consistency (CISC, Taubenfeld et al. 2025) weights each reply's vote by
a softmax of its confidence within the item: an answer's weight is the sum of exp((score - best) / T) over the
replies that give it. T -> infinity is the plain vote; T -> 0 takes the one surest reply. The AUROC above is over
all voters; a weighted vote needs the signal to rank the replies of ONE item, which a long careful reply scoring
lower than a short one may spoil, so the per-token mean is tried beside the sum.

Per (item, seed) pair of the store's 5-voter sc-cot bank the team is replayed on the offline pool (no worker
call), each voter's reply is graded alone (`graded_replies`) and scored through the LLM cache (the bank holds
the scores every gate run and the `train` teacher made; `--live` scores the missing ones on the embedded model,
~10 s a reply on one core here, and caches them, so `lemon cache export` banks them; without it a pair with a
missing score is left out and counted). Printed per rule: right pairs, and the pairs it wins and loses against
the plain vote (its discordant pairs) with McNemar's exact p. Pick T on `train`, then read `test` once.
Usage: python experiments/weighted_vote.py [--store S] [--benchmarks gsm8k svamp] [--split train] [--live]
"""

from __future__ import annotations

import argparse
import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

from lemon.benchmarks.base import Benchmark
from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.errors import BackendError, run_script
from lemon.evaluation.agent_replies import graded_replies
from lemon.evaluation.bank import BANK_VOTERS, bank_keys, vote_team
from lemon.evaluation.item import item_seed
from lemon.evaluation.report import mcnemar_exact
from lemon.evaluation.store import ResultsStore
from lemon.llm.pools import load_pool
from lemon.paths import lemon_home
from lemon.runtime import Executor
from lemon.spec.roles import RoleLibrary

# (signal, temperature): the sum of the reply's log-probabilities (nats) or its mean per completion token.
RULES: tuple[tuple[str, float], ...] = (("sum", 100.0), ("sum", 30.0), ("sum", 10.0), ("sum", 3.0),
                                        ("mean", 0.3), ("mean", 0.1), ("mean", 0.03))


@dataclass(frozen=True)
class Voter:
    """One voter's reply, read: its extracted answer (None: none found), whether it is right, its signals."""

    key: str | None
    right: bool
    score: float  # sum of the reply's token log-probabilities
    tokens: int  # completion tokens

    def signal(self, name: str) -> float:
        return self.score if name == "sum" else self.score / max(self.tokens, 1)


def weighted_vote(keys: Sequence[str | None], signals: Sequence[float], temperature: float) -> int:
    """The index of the winning reply: each answer weighs the sum of exp((signal - best) / T) over its replies
    (T = inf: one each, the plain vote); the heaviest answer wins, ties to the earliest reply, whose index is
    returned. Replies without an answer do not vote; with none that has one, the first reply wins (as
    `majority_vote` does)."""
    voting = [i for i, k in enumerate(keys) if k]
    if not voting:
        return 0
    best = max(signals[i] for i in voting)
    weight: dict[str, float] = {}
    for i in voting:
        share = 1.0 if math.isinf(temperature) else math.exp((signals[i] - best) / temperature)
        weight[keys[i]] = weight.get(keys[i], 0.0) + share  # type: ignore[index]
    top = max(weight.values())
    return next(i for i in voting if weight[keys[i]] == top)  # type: ignore[index]


async def scored_pairs(bench: Benchmark, split: str, store: ResultsStore, live: bool) -> tuple[list, int]:
    """Each banked (item, seed) pair's voters, and how many pairs were left out for a score not in the cache."""
    keys, config = bank_keys(store, bench.name, "large", None, split)
    items = {str(i.id): i for i in load_split(bench.name, split)}
    replay = load_pool("cpu", offline=True)
    scoring = load_pool("cpu") if live else replay
    params = replay.params(temperature=float(config["temperature"]), max_tokens=config.get("max_tokens"))
    executor, scorer = Executor(replay, RoleLibrary.load(), params=params), scoring.level("large").backend
    spec = vote_team(bench.kind, "large", BANK_VOTERS)
    pairs, missing = [], 0
    try:
        for item_id, seed in sorted(keys):
            item, run_seed = items[item_id], item_seed(bench.name, item_id, seed)
            prompt = bench.prompt(item)
            result = await executor.run(spec, prompt, seed=run_seed,
                                        vote_key=lambda text, it=item: bench.extract(text, it))
            voters = spec.agents[:-1]
            graded = graded_replies(bench, item, {a.name: result.outputs[a.name] for a in voters})
            try:
                scores = [await scorer.score(executor.request(a, prompt, {}, spec, run_seed),  # type: ignore[attr-defined]
                                             result.outputs[a.name]) for a in voters]
            except BackendError:
                missing += 1
                continue
            pairs.append([Voter(_key(bench, result.outputs[a.name], item), graded[a.name], s,
                                result.tokens_by_agent[a.name]["completion"])
                          for a, s in zip(voters, scores, strict=True)])
    finally:
        await replay.aclose()
        if live:
            await scoring.aclose()
    return pairs, missing


def _key(bench: Benchmark, text: str, item: object) -> str | None:
    answer = bench.extract(text, item)  # type: ignore[arg-type]
    return None if answer is None else str(answer)


def within_item_auroc(pairs: list[list[Voter]], signal: str) -> float:
    """P(a right reply's signal > a wrong reply's of the SAME item), ties half, over the items with both: what a
    weighted vote needs (an AUROC over all replies also rewards telling easy items from hard ones)."""
    wins = total = 0.0
    for pair in pairs:
        for r in (v.signal(signal) for v in pair if v.right):
            for w in (v.signal(signal) for v in pair if not v.right):
                wins, total = wins + (r > w) + 0.5 * (r == w), total + 1
    return wins / total if total else float("nan")


def rule_lines(pairs: list[list[Voter]]) -> list[str]:
    """One line per rule: right pairs, wins / losses against the plain vote, McNemar's exact p."""
    def right_under(signal: str, temperature: float) -> list[bool]:
        return [p[weighted_vote([v.key for v in p], [v.signal(signal) for v in p], temperature)].right
                for p in pairs]

    plain = right_under("sum", math.inf)
    lines = [f"  plain vote: {sum(plain)}/{len(pairs)}; a voter right: "
             f"{sum(any(v.right for v in p) for p in pairs)}; the surest reply alone: "
             f"{sum(max(p, key=lambda v: v.score).right for p in pairs)}; within-item AUROC: sum "
             f"{within_item_auroc(pairs, 'sum'):.3f}, mean {within_item_auroc(pairs, 'mean'):.3f}"]
    for signal, temperature in RULES:
        right = right_under(signal, temperature)
        wins = sum(r and not q for r, q in zip(right, plain, strict=True))
        losses = sum(q and not r for r, q in zip(right, plain, strict=True))
        lines.append(f"  {signal} T={temperature:g}: {sum(right)}/{len(pairs)} (+{wins} -{losses} against the plain "
                     f"vote, p = {mcnemar_exact(wins, losses):.3g})")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=str(lemon_home() / "six-benchmarks.sqlite"))
    ap.add_argument("--benchmarks", nargs="+", default=["gsm8k", "svamp", "multiarith", "aqua", "mmlu"])
    ap.add_argument("--split", help="default: each benchmark's evaluation split (MMLU: `val`)")
    ap.add_argument("--live", action="store_true", help="score the replies the cache lacks on the embedded model")
    args = ap.parse_args()
    pooled: list[list[Voter]] = []
    with ResultsStore(args.store) as store:
        for name in args.benchmarks:
            bench = get_benchmark(name)
            split = args.split or bench.default_split
            pairs, missing = asyncio.run(scored_pairs(bench, split, store, args.live))
            pooled += pairs
            print(f"{name} `{split}`: {len(pairs)} pairs ({missing} left out: a score not in the cache)")
            print("\n".join(rule_lines(pairs)) if pairs else "  nothing to compare", flush=True)
    if len(args.benchmarks) > 1 and pooled:
        print(f"pooled: {len(pooled)} pairs\n" + "\n".join(rule_lines(pooled)), flush=True)


if __name__ == "__main__":
    run_script(main)
