"""Does a reply's own arithmetic say whether it is right? The verifier that costs nothing, on the 5-vote's replies.

Why: `lemon report --replies` found that the 5-vote's majority loses 11-16 pairs that one of its voters had right
on GSM8K, AQuA and MMLU, so the room is in an aggregator that verifies rather than counts. The cheapest verifier
needs no model call: recompute every `a op b = c` a reply states, and leave the replies with a wrong one out of
the vote (all of them stay when every reply has one). Read off the store's 5-voter sc-cot runs (no model call):
per benchmark, how many replies state arithmetic that could be checked, how many state a wrong result, how many
of those were right anyway, and the plain and the checked vote over the same (item, seed) pairs, with the
runtime's own vote (`majority_vote`: ties to the earliest voter) and the benchmark's own extractor and grader.
Usage: python experiments/arithmetic_check.py [--store S] [--benchmarks gsm8k svamp aqua] [--split test]
       [--level large]
"""

from __future__ import annotations

import argparse
import ast
import functools
import operator
import re
from collections import Counter
from collections.abc import Iterator

from lemon.benchmarks.base import Benchmark, Item
from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.errors import run_script
from lemon.evaluation.agent_replies import graded_replies
from lemon.evaluation.bank import bank_keys, is_bank_run
from lemon.evaluation.store import ResultsStore
from lemon.paths import lemon_home
from lemon.runtime import VoteKey, majority_vote

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_EXPRESSION_CHARS = frozenset("0123456789.+-*/() ")
_RESULT = re.compile(r"\s*(-?\d+(?:\.\d+)?)")
_HAS_OPERATION = re.compile(r"\d\s*\)?\s*[-+*/]\s*\(?\s*\d")
_SPELLINGS = (("\\times", "*"), ("×", "*"), ("\\cdot", "*"), ("\\div", "/"), ("÷", "/"), ("$", ""),
              ("\\(", " "), ("\\)", " "), ("\\[", " "), ("\\]", " "))


def normalise(text: str) -> str:
    """Operators and numbers as Python writes them: `\\times`, `×` and `3 x 4` as `*`, `÷` as `/`, `\\frac{a}{b}`
    as `(a/b)`, thousands separators and dollar signs dropped."""
    for spelled, plain in _SPELLINGS:
        text = text.replace(spelled, plain)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(r"(?<=\d)\s*x\s*(?=\d)", "*", text)
    return re.sub(r"\\frac\{(\d+(?:\.\d+)?)\}\{(\d+(?:\.\d+)?)\}", r"(\1/\2)", text)


def statements(text: str) -> Iterator[tuple[str, str]]:
    """(expression, stated result) for each `expression = number` in normalised `text` whose expression holds an
    operation. The expression is the longest run of arithmetic characters before `=`, found by a backward scan:
    a regular expression with nested repeats backtracks without end on a long reply."""
    for eq in re.finditer("=", text):
        start = eq.start()
        while start > 0 and text[start - 1] in _EXPRESSION_CHARS:
            start -= 1
        expression, result = text[start:eq.start()].strip(), _RESULT.match(text, eq.end())
        if result and _HAS_OPERATION.search(expression):
            if expression.count("(") != expression.count(")"):
                expression = expression.strip("() ")
            yield expression, result.group(1)


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    raise ValueError("not arithmetic")


@functools.cache  # checked_vote and the counts read each reply: parse it once
def arithmetic_errors(text: str) -> tuple[int, int]:
    """(statements checked, statements whose stated result is wrong) in one reply. A result rounded to cents
    or to half a percent of itself counts as right; an expression Python cannot read is not checked."""
    checked = wrong = 0
    for expression, stated in statements(normalise(text)):
        try:
            value = _value(ast.parse(expression, mode="eval").body)
        except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
            continue
        result = float(stated)
        checked += 1
        wrong += abs(value - result) > max(0.011, 0.005 * abs(result))
    return checked, wrong


def checked_vote(replies: list[str], key: VoteKey) -> str:
    """The runtime's majority vote over the replies whose stated arithmetic is all right (all, if none is)."""
    sound = [r for r in replies if arithmetic_errors(r)[1] == 0]
    return majority_vote(sound or replies, key)


def study(store: ResultsStore, bench: Benchmark, items: dict[str, Item], split: str, level: str) -> Counter[str]:
    """The counts over the (item, seed) pairs of `bench`'s 5-voter bank, each pair once."""
    keys, _ = bank_keys(store, bench.name, level, split=split)
    counts: Counter[str] = Counter()
    for run in store.runs():
        if not (is_bank_run(run) and (run.benchmark, run.split, run.level) == (bench.name, split, level)):
            continue
        found = store.traces(run.run_id, sorted(keys))
        for (item_id, _seed), trace in found.items():
            topology, contents = trace.topology, trace.contents
            voters = [a["name"] for a in topology.get("agents", []) if a["name"] != topology.get("output")]
            counts += _pair_counts(bench, items[item_id], [contents.get(v) or "" for v in voters])
        keys -= set(found)
    return counts


def _pair_counts(bench: Benchmark, item: Item, replies: list[str]) -> Counter[str]:
    """One pair's counts: each reply graded alone (`graded_replies`), and the two votes' winners."""
    graded = graded_replies(bench, item, {str(i): reply for i, reply in enumerate(replies)})
    right = [graded[str(i)] for i in range(len(replies))]

    def key(text: str) -> str | None:
        answer = bench.extract(text, item)
        return None if answer is None else str(answer)

    counts = Counter(pairs=1, replies=len(replies), right=sum(right),
                     plain=right[replies.index(majority_vote(replies, key))],
                     checked_vote=right[replies.index(checked_vote(replies, key))])
    for reply, ok in zip(replies, right, strict=True):
        checked, wrong = arithmetic_errors(reply)
        counts.update(stated=checked > 0, wrong=wrong > 0, wrong_but_right=wrong > 0 and ok)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=str(lemon_home() / "six-benchmarks.sqlite"))
    ap.add_argument("--benchmarks", nargs="+", default=["gsm8k", "svamp", "aqua"])
    ap.add_argument("--split", default="test")
    ap.add_argument("--level", default="large")
    args = ap.parse_args()
    store = ResultsStore(args.store)
    for name in args.benchmarks:
        bench = get_benchmark(name)
        c = study(store, bench, {it.id: it for it in load_split(name, args.split)}, args.split, args.level)
        print(f"{name} `{args.split}`, {c['pairs']} pairs: replies {c['replies']} ({c['right']} right); stating "
              f"arithmetic {c['stated']}; a wrong result in {c['wrong']} ({c['wrong_but_right']} of them right "
              f"anyway); plain vote {c['plain']} right, checked vote {c['checked_vote']}", flush=True)


if __name__ == "__main__":
    run_script(main)
