"""Which part of a voter's reply says whether it is right: the whole reply's log-probability (what the logprob
gate scores today), its mean per token, or the log-probability of the final answer alone.

Why: the gate takes the first voter the model was sure of alone. Scored on the whole reply it is sure and
wrong on SVAMP, and on GSM8K `train` over 24 draw orders it loses 4.5 points to the 5-vote at -30 nats: a long
careful reply scores low, a short wrong one high. A reply's answer tokens, read after its own reasoning, may
say more about whether the answer is right (the model's probability of the number it wrote).

Per banked (item, seed) of a split (the 5-voter sc-cot bank, replayed on an offline pool), each voter's reply is
scored token by token (`EmbeddedBackend.token_logprobs`: one teacher-forced pass, no worker call) and graded.
Printed per signal: the AUROC of telling a right voter from a wrong one, and the gate it would make (the first
voter whose signal is >= t is taken alone, else agree 2 of 5, as `stop: {logprob: t, agree: 2}` runs) at
thresholds that take a voter alone 30-90 % of the time, each with its expected accuracy, voters run and worker
tokens over 24 orders of the draws. The gate simulation restates the runtime's rule in a few lines, for this
study only; a signal worth keeping goes into the runtime and is measured there. Last, per benchmark: a
logistic probe over every signal (cross-validated by item), and how well the question alone (its length, its
count of numbers) tells an easy item from a hard one. Per-voter results are kept in
`--cache` (JSON lines), so an interrupted run resumes.
Usage: python experiments/answer_confidence.py [--benchmarks gsm8k svamp] [--split train] [--limit 20]
       [--store S] [--cache F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.errors import run_script
from lemon.evaluation.bank import BANK_VOTERS, bank_keys, vote_team
from lemon.evaluation.item import item_seed
from lemon.evaluation.store import ResultsStore
from lemon.llm.pools import load_pool
from lemon.paths import lemon_home
from lemon.runtime import Executor
from lemon.spec.roles import RoleLibrary
from lemon.train.rollout import draw_orders

SIGNALS = ("reply", "mean", "min", "low3", "answer_first", "answer_last")
ORDERS = 24
NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")


def answer_spans(text: str, answer: str | None) -> list[tuple[int, int]]:
    """Byte spans of the numbers in `text` equal to the extracted `answer`, first to last."""
    spans = []
    for m in NUMBER.finditer(text) if answer is not None else ():
        raw = m.group().replace("$", "").replace(",", "")
        try:
            if float(raw) == float(answer):  # type: ignore[arg-type]
                spans.append((len(text[:m.start()].encode()), len(text[:m.end()].encode())))
        except ValueError:
            continue
    return spans


def span_sum(lens: list[int], lps: list[float], span: tuple[int, int]) -> float:
    """Sum of the log-probabilities of the tokens overlapping byte `span`."""
    at, total = 0, 0.0
    for n, lp in zip(lens, lps, strict=True):
        if at < span[1] and at + n > span[0]:
            total += lp
        at += n
    return total


def signals(v: dict) -> dict[str, float]:
    """Each signal of one scored reply (-inf where its answer is not found in it)."""
    lps, lens = v["lps"], v["lens"]
    spans = answer_spans(v["text"], v["key"])
    low = sorted(lps)
    return {"reply": sum(lps), "mean": sum(lps) / max(len(lps), 1), "min": low[0] if low else 0.0,
            "low3": sum(low[:3]), "answer_first": span_sum(lens, lps, spans[0]) if spans else float("-inf"),
            "answer_last": span_sum(lens, lps, spans[-1]) if spans else float("-inf")}


async def voters_of(benchmark: str, split: str, limit: int, store: Path, cache: Path) -> list[dict]:
    """Per banked (item, seed) of the first `limit` items, its 5 voters: answer, right, tokens, signals."""
    done = {}
    if cache.exists():
        for line in cache.read_text().splitlines():
            row = json.loads(line)
            done[(row["benchmark"], row["item"], row["seed"])] = row
    with ResultsStore(store) as st:
        keys, config = bank_keys(st, benchmark, "large", None, split)
    task, roles = get_benchmark(benchmark), RoleLibrary.load()
    items = {str(i.id): i for i in load_split(benchmark, split)}
    order = [str(i.id) for i in load_split(benchmark, split)][:limit]
    replay, live = load_pool("cpu", offline=True), load_pool("cpu")
    params = replay.params(temperature=float(config["temperature"]), max_tokens=config.get("max_tokens"))
    executor, scorer = Executor(replay, roles, params=params), live.level("large").backend.inner
    spec = vote_team(task.kind, "large", BANK_VOTERS)
    rows = []
    try:
        for item_id, seed in sorted(k for k in keys if k[0] in order):
            if (benchmark, item_id, seed) in done:
                rows.append(done[(benchmark, item_id, seed)])
                continue
            item, run_seed = items[item_id], item_seed(benchmark, item_id, seed)
            result = await executor.run(spec, task.prompt(item), seed=run_seed,
                                        vote_key=lambda text, it=item: task.extract(text, it))
            voters = []
            for agent in spec.agents[:-1]:
                text = result.outputs[agent.name]
                pred = task.extract(text, item)
                request = executor.request(agent, task.prompt(item), {}, spec, run_seed)
                tokens = await scorer.token_logprobs(request, text)
                used = result.tokens_by_agent[agent.name]
                voters.append({"key": pred, "right": pred is not None and bool(task.check(pred, item)),
                               "tokens": used["prompt"] + used["completion"], "text": text,
                               "lps": [lp for _, lp in tokens], "lens": [len(t) for t, _ in tokens]})
            row = {"benchmark": benchmark, "item": item_id, "seed": seed, "voters": voters}
            with cache.open("a") as f:
                f.write(json.dumps(row) + "\n")
            rows.append(row)
    finally:
        await replay.aclose()
        await live.aclose()
    return rows


def gate(voters: list[dict], order: tuple[int, ...], signal: str, t: float) -> tuple[bool, int, int]:
    """(right, worker tokens, voters run) of `stop: {logprob: t, agree: 2}` over `voters` run in `order`."""
    run: list[dict] = []
    for k in order:
        v = voters[k]
        run.append(v)
        if v[signal] >= t:
            return v["right"], sum(x["tokens"] for x in run), len(run)
        counts = Counter(x["key"] for x in run if x["key"] is not None)
        if counts and counts.most_common(1)[0][1] >= 2:
            break
    counts = Counter(x["key"] for x in run if x["key"] is not None)
    top = counts.most_common(1)[0][0] if counts else None
    right = next((x["right"] for x in run if x["key"] == top), False)
    return right, sum(x["tokens"] for x in run), len(run)


def auroc(voters: list[dict], signal: str) -> float:
    """P(a right voter's signal > a wrong one's), ties half."""
    right = [v[signal] for v in voters if v["right"]]
    wrong = [v[signal] for v in voters if not v["right"]]
    if not right or not wrong:
        return float("nan")
    wins = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    return wins / (len(right) * len(wrong))


def expected(rows: list[dict], signal: str, t: float) -> tuple[float, float, float]:
    """Mean over pairs and 24 draw orders of the gate at `t`: (accuracy %, worker tokens, voters run)."""
    out = []
    for row in rows:
        seed = item_seed(row["benchmark"], row["item"], row["seed"])
        runs = [gate(row["voters"], o, signal, t) for o in draw_orders(seed, ORDERS, BANK_VOTERS)]
        out.append([statistics.mean(float(r[i]) for r in runs) for i in range(3)])
    return (100 * statistics.mean(x[0] for x in out), statistics.mean(x[1] for x in out),
            statistics.mean(x[2] for x in out))


def table(name: str, rows: list[dict]) -> list[str]:
    rows = [{**r, "voters": [{**v, **signals(v)} for v in r["voters"]]} for r in rows]
    voters = [v for r in rows for v in r["voters"]]
    never = float("inf")
    vote5 = expected(rows, "reply", never)  # no voter is ever sure: agree 2 of 5
    lines = [f"### {name}: {len(rows)} (item, seed) pairs, {len(voters)} voters "
             f"({100 * sum(v['right'] for v in voters) / len(voters):.1f} % right alone)", "",
             f"agree 2 of 5 (no gate): {vote5[0]:.1f} % at {vote5[1]:.0f} tokens, {vote5[2]:.2f} voters", "",
             "| signal | AUROC | takes one alone | threshold | accuracy % | worker tokens | voters run |",
             "|---|---|---|---|---|---|---|"]
    for signal in SIGNALS:
        values = sorted(v[signal] for v in voters)
        for share in (0.3, 0.5, 0.7, 0.9):
            t = values[int((1 - share) * (len(values) - 1))]
            acc, tokens, run = expected(rows, signal, t)
            lines.append(f"| {signal} | {auroc(voters, signal):.3f} | {100 * share:.0f} % | {t:.3g} | {acc:.1f} | "
                         f"{tokens:.0f} | {run:.2f} |")
    return [*lines, ""]


def probe_features(v: dict) -> list[float]:
    """The six signals, the reply's length (log tokens), its share of tokens below -0.1 nats, and whether its
    answer is a whole number (GSM8K and SVAMP answers are)."""
    sig = signals(v)
    lps = v["lps"]
    whole = v["key"] is not None and re.fullmatch(r"-?\d+", str(v["key"])) is not None
    return [*(max(sig[k], -1e3) for k in SIGNALS), math.log(len(lps) + 1),
            sum(lp < -0.1 for lp in lps) / max(len(lps), 1), float(whole)]


def fit_probe(train: list[tuple[list[float], bool]]) -> Callable[[list[float]], float]:
    """A logistic regression (L2 0.01, standardised features, LBFGS) fitted to (features, right) pairs; returns
    the fitted score (a logit)."""
    import torch

    x = torch.tensor([f for f, _ in train])
    y = torch.tensor([float(t) for _, t in train])
    mu, sd = x.mean(0), x.std(0) + 1e-6
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=200)

    def loss() -> torch.Tensor:
        opt.zero_grad()
        out = torch.nn.functional.binary_cross_entropy_with_logits((x - mu) / sd @ w + b, y) + 0.01 * w @ w
        out.backward()
        return out

    opt.step(loss)
    return lambda f: float(((torch.tensor(f) - mu) / sd @ w + b).detach())


def probe_auroc(rows: list[dict], folds: int = 5) -> float:
    """AUROC of a logistic probe over `probe_features`, each voter scored by a probe fitted without its item
    (`folds`-fold cross-validation split by item): can the signals together say more than the reply alone?"""
    items = sorted({r["item"] for r in rows})
    scored = []
    for k in range(folds):
        held = set(items[k::folds])
        probe = fit_probe([(probe_features(v), v["right"]) for r in rows if r["item"] not in held
                           for v in r["voters"]])
        scored += [{"right": v["right"], "probe": probe(probe_features(v))}
                   for r in rows if r["item"] in held for v in r["voters"]]
    return auroc(scored, "probe")


def question_aurocs(benchmark: str, split: str, rows: list[dict]) -> dict[str, float]:
    """How well the question alone tells an easy item (at most one of its 5 voters wrong) from a hard one: the
    AUROC of its length in words and of the count of numbers in it (both read as "shorter is easier")."""
    task = get_benchmark(benchmark)
    items = {str(i.id): i for i in load_split(benchmark, split)}
    out = {}
    for name, feature in (("words", lambda q: len(q.split())), ("numbers", lambda q: len(NUMBER.findall(q)))):
        marks = [{"right": sum(v["right"] for v in r["voters"]) >= 4,
                  name: -feature(task.prompt(items[r["item"]]))} for r in rows]
        out[name] = auroc(marks, name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmarks", nargs="+", default=["gsm8k", "svamp"])
    ap.add_argument("--split", default="train")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--store", type=Path, default=lemon_home() / "adaptive-cpu.sqlite")
    ap.add_argument("--cache", type=Path, default=lemon_home() / "answer-confidence.jsonl")
    args = ap.parse_args()
    for bench in args.benchmarks:
        rows = asyncio.run(voters_of(bench, args.split, args.limit, args.store, args.cache))
        print("\n".join(table(f"{bench} `{args.split}`", rows)), flush=True)
        questions = question_aurocs(bench, args.split, rows)
        print(f"logistic probe over every signal (5-fold by item): AUROC {probe_auroc(rows):.3f}; the question "
              f"alone (easy: <= 1 of 5 voters wrong): words {questions['words']:.3f}, numbers "
              f"{questions['numbers']:.3f}\n", flush=True)


if __name__ == "__main__":
    run_script(main)
