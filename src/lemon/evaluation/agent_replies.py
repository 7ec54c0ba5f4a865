"""Where a team's answer was lost: every agent's own reply graded as if it were the team's answer.

Why: on SVAMP at `large`, four fixed topologies of three or four agents each scored no better than one CoT agent
and below the 5-vote. Accuracy alone cannot say whether no agent found the answer or the team found it and lost it
on the way to its output. Grading each agent's reply with the benchmark's own extractor and grader (the ones that
graded the output) splits the output's misses into "no agent had it" and "an agent had it, the output did not";
the first asks for more or better solvers, the second for a better way to combine them. The replies are read from
the stored traces, so this costs no model call. Code replies run in the sandbox like the output did (~0.1 s each), so
`ReplyGrader` grades each distinct (item, answer) once, a few at a time.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lemon.benchmarks.base import Benchmark, DataDir, Item
from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.evaluation.methods import shown_method
from lemon.evaluation.store import ResultsStore, RunInfo


@dataclass(frozen=True)
class ReplyTally:
    """Counts over one run's (item, seed) pairs whose trace holds the replies of two agents or more.

    `others`: the agents other than the output. `lost`: some other agent right, the output wrong. `alone`: the
    output right with no other agent right (a decision agent that solved it itself)."""

    pairs: int = 0
    output_right: int = 0
    lost: int = 0
    alone: int = 0
    none_right: int = 0
    agent_right: Counter[str] = field(default_factory=Counter)
    agent_replies: Counter[str] = field(default_factory=Counter)

    @property
    def some_other_right(self) -> int:
        """Pairs on which some agent other than the output was right: the lost ones, and the output's right
        ones that it did not get alone."""
        return self.lost + self.output_right - self.alone

    def other_accuracy(self, output: str) -> float:
        """The share of the other agents' replies that were right on their own (all agents pooled)."""
        n = sum(v for a, v in self.agent_replies.items() if a != output)
        return sum(v for a, v in self.agent_right.items() if a != output) / n if n else float("nan")


def graded_replies(bench: Benchmark, item: Item, contents: Mapping[str, str]) -> dict[str, bool]:
    """Per agent: would its reply, read as the team's answer, have been graded right?"""
    return ReplyGrader(bench, threads=1).grade([(item, contents)])[0]


class ReplyGrader:
    """One benchmark's extractor and grader over many replies, each distinct (item, answer) checked once.

    Why: a code answer is checked by running its program in the sandbox, and the same program recurs across a
    report's runs (a cached reply; one agent in two topologies); checking the distinct ones in `threads` threads
    (by default the harness's bound on concurrent sandboxed checks, half the cores) keeps `--replies` on HumanEval
    at a minute or two."""

    def __init__(self, bench: Benchmark, threads: int | None = None) -> None:
        threads = threads or max(1, (os.cpu_count() or 2) // 2)
        self._bench, self._threads = bench, threads if bench.sandboxed else 1
        self._checked: dict[tuple[str, str], bool] = {}

    def grade(self, pairs: Sequence[tuple[Item, Mapping[str, str]]]) -> list[dict[str, bool]]:
        """Per pair, per agent: is its reply, read as the team's answer, right?"""
        answers = [{agent: self._bench.extract(text or "", item) for agent, text in contents.items()}
                   for item, contents in pairs]
        items = {item.id: item for item, _ in pairs}
        todo = sorted({(item.id, a) for (item, _), got in zip(pairs, answers, strict=True) for a in got.values()
                       if a is not None and (item.id, a) not in self._checked})
        with ThreadPoolExecutor(max_workers=self._threads) as pool:
            verdicts = list(pool.map(lambda key: bool(self._bench.check(key[1], items[key[0]])), todo))
        self._checked.update(zip(todo, verdicts, strict=True))
        return [{agent: a is not None and self._checked[(item.id, a)] for agent, a in got.items()}
                for (item, _), got in zip(pairs, answers, strict=True)]


def tally_pair(tally: ReplyTally, graded: Mapping[str, bool], output: str, output_right: bool) -> ReplyTally:
    """`tally` with one more (item, seed) pair counted: `graded` as `graded_replies` gives it."""
    others = any(ok for agent, ok in graded.items() if agent != output)
    return ReplyTally(
        pairs=tally.pairs + 1, output_right=tally.output_right + output_right,
        lost=tally.lost + (others and not output_right),
        alone=tally.alone + (output_right and not others),
        none_right=tally.none_right + (not others and not output_right),
        agent_right=tally.agent_right + Counter(a for a, ok in graded.items() if ok),
        agent_replies=tally.agent_replies + Counter(graded.keys()))


def tally_run(store: ResultsStore, run: RunInfo, items: Mapping[str, Item],
              grader: ReplyGrader | None = None) -> tuple[ReplyTally, str]:
    """The tally of `run` over its pairs with two replies or more, and its output agent's name (the most common
    one; "" when no pair counted). `grader`: shared across a report's runs of one benchmark."""
    grader = grader or ReplyGrader(get_benchmark(run.benchmark))
    rows = {(r.item_id, r.seed): r for r in store.items(run.run_id)}
    kept = []
    for key, trace in store.traces(run.run_id, rows).items():
        contents, output = trace.contents, trace.topology.get("output")
        if len(contents) >= 2 and output is not None and key[0] in items:
            kept.append((key, contents, output))
    tally, outputs = ReplyTally(), Counter[str]()
    graded = grader.grade([(items[key[0]], contents) for key, contents, _ in kept])
    for (key, _, output), agents in zip(kept, graded, strict=True):
        tally = tally_pair(tally, agents, output, rows[key].correct)
        outputs[output] += 1
    return tally, (outputs.most_common(1)[0][0] if outputs else "")


def replies_lines(store: ResultsStore, runs: Sequence[RunInfo], data_dir: DataDir = None) -> dict[str, list[str]]:
    """Per benchmark, the markdown section "where the answer was lost" over its multi-agent runs."""
    sections: dict[str, list[str]] = {}
    for bench_name in sorted({r.benchmark for r in runs}):
        bench_runs = [r for r in runs if r.benchmark == bench_name]
        lines = _table_lines(store, bench_runs, data_dir)
        if lines:
            sections[bench_name] = lines
    return sections


def _table_lines(store: ResultsStore, runs: Sequence[RunInfo], data_dir: DataDir) -> list[str]:
    """One row per run with two agents' replies or more on some pair."""
    items: dict[str, dict[str, Item]] = {}
    grader, rows = ReplyGrader(get_benchmark(runs[0].benchmark)), []
    for run in runs:
        if run.split not in items:
            items[run.split] = {it.id: it for it in load_split(run.benchmark, run.split, data_dir)}
        tally, output = tally_run(store, run, items[run.split], grader)
        if tally.pairs:
            rows.append(_row(run, tally, output))
    if not rows:
        return []
    return ["", f"### Where the answer was lost ({runs[0].benchmark}: each agent's reply graded alone)", "",
            "Over the (item, seed) pairs on which two agents or more replied. *Lost at the output*: some agent other "
            "than the output was right and the output was wrong; *no agent right*: no reply had the answer (more or "
            "better solvers would be needed, not a better way to combine them). *Best agent*: of the agents that "
            "replied on at least half the pairs, right / replies.", "",
            "| method | split | pairs | output right | some other agent right | lost at the output "
            "| output right alone | no agent right | other agents' replies right | best agent | run |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|", *rows]


def _row(run: RunInfo, t: ReplyTally, output: str) -> str:
    # the best of the agents that replied on at least half the pairs (a late voter of a stop rule replies on few)
    others = {a: t.agent_right[a] / n for a, n in t.agent_replies.items() if a != output and 2 * n >= t.pairs}
    best = min(others, key=lambda a: (-others[a], a)) if others else ""
    shown = f"{best} {t.agent_right[best]}/{t.agent_replies[best]}" if best else "–"
    return (f"| {shown_method(run.method)} | {run.split} | {t.pairs} | {t.output_right} "
            f"({100 * t.output_right / t.pairs:.1f} %) | {t.some_other_right} | **{t.lost}** | {t.alone} | "
            f"{t.none_right} | {100 * t.other_accuracy(output):.1f} % | {shown} | `{run.run_id}` |")
