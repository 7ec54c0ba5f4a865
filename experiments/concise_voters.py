"""Concise voters: CoT voters told to be brief, against the sample bank's voters on the same items.

Why: issue 24's bar asks for the 5-vote's accuracy at half its tokens. A voter's tokens are its prompt (~170)
and its reasoning (~280 on GSM8K); a duty that asks for the calculations alone shortens the second. If a
concise voter kept most of its accuracy, a vote of concise voters would move the front, where the logprob gate
(one sure voter taken alone) does not reach the bar.

Runs `voters` voters with DUTY (live worker calls, cached in the LLM cache; the banked voters are untouched)
on the first `limit` items of a split, seed 0, and prints per-voter accuracy and tokens, and `agree 2 of N`
in written order, beside the banked voters of the same items (the bank's first `voters` draws).
Usage: python experiments/concise_voters.py [--benchmark gsm8k] [--split train] [--limit 20] [--voters 3]
       [--duty TEXT]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.errors import run_script
from lemon.evaluation.bank import BANK_VOTERS, vote_team
from lemon.evaluation.item import item_seed
from lemon.llm.pools import load_pool
from lemon.runtime import Executor
from lemon.spec.model import Spec, StopRule
from lemon.spec.roles import RoleLibrary

DUTY = "Be brief: write only the calculations, one short line per step."


def with_duty(spec: Spec, duty: str) -> Spec:
    return spec.model_copy(update={"agents": tuple(
        a if a.role == "majority_vote" else a.model_copy(update={"duty": duty}) for a in spec.agents)})


async def measure(benchmark: str, split: str, limit: int, spec: Spec) -> tuple[list[bool], list[int], float, float]:
    """(each voter right, each voter's tokens, agree-2 accuracy %, agree-2 tokens) over the items, seed 0."""
    task, pool = get_benchmark(benchmark), load_pool("cpu")
    executor = Executor(pool, RoleLibrary.load(), params=pool.params(temperature=0.7, max_tokens=None))
    stopping = spec.model_copy(update={"agents": (*spec.agents[:-1], spec.agents[-1].model_copy(
        update={"stop": StopRule(agree=2)}))})
    right, tokens, vote_right, vote_tokens = [], [], [], []
    try:
        for item in load_split(benchmark, split)[:limit]:
            seed, key = item_seed(benchmark, item.id, 0), (lambda text, it=item: task.extract(text, it))
            full = await executor.run(spec, task.prompt(item), seed=seed, vote_key=key)
            for agent in spec.agents[:-1]:
                pred, used = task.extract(full.outputs[agent.name], item), full.tokens_by_agent[agent.name]
                right.append(pred is not None and bool(task.check(pred, item)))
                tokens.append(used["prompt"] + used["completion"])
            vote = await executor.run(stopping, task.prompt(item), seed=seed, vote_key=key)  # cache hits
            pred = task.extract(vote.answer, item)
            vote_right.append(pred is not None and bool(task.check(pred, item)))
            vote_tokens.append(vote.total_tokens)
    finally:
        await pool.aclose()
    return right, tokens, 100 * statistics.mean(vote_right), statistics.mean(vote_tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", default="gsm8k")
    ap.add_argument("--split", default="train")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--voters", type=int, default=3, choices=range(2, BANK_VOTERS + 1))
    ap.add_argument("--duty", default=DUTY)
    args = ap.parse_args()
    banked = vote_team(get_benchmark(args.benchmark).kind, "large", args.voters)
    for name, spec in (("concise", with_duty(banked, args.duty)), ("banked", banked)):
        right, tokens, acc, used = asyncio.run(measure(args.benchmark, args.split, args.limit, spec))
        print(f"{name}: {args.limit} {args.benchmark} `{args.split}` items, seed 0: a voter "
              f"{100 * statistics.mean(right):.1f} % at {statistics.mean(tokens):.0f} tokens; agree 2 of "
              f"{args.voters} (written order) {acc:.1f} % at {used:.0f} tokens", flush=True)


if __name__ == "__main__":
    run_script(main)
