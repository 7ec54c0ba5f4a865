"""Does running a team's programs on the prompt's own examples pick a passing one? A verifier for code teams.

Why: `lemon report --replies` on HumanEval (30 test items x 2 seeds, `large`) found that the 5-vote's output
passed on 51 pairs while some voter's program passed on 57: programs rarely match as text, so the runtime's vote
falls to the first voter. The chain's solver passed on 50 and its output on 42: a later agent broke a passing
program. The prompt's docstring shows examples (`>>> f(x)` then the value), which any user of the team has: run
every agent's program on them in the sandbox and answer with the first one that passes them all.

The examples are read from the task text as the runtime's `examples` gate reads them (`lemon.runtime.examples_gate`,
which this replay preceded); the programs as the benchmark's extractor reads them. The rule, fixed before it was
measured: candidates in order are the team's output, then every agent in the spec's order; the answer is the
first whose program passes all of the item's public examples; with no passing candidate, or an item without
examples that Python can read back, the output stays. Graded with the upstream tests (the benchmark's own
grader), on the stored replies (no model call), paired against the output on the same (item, seed) pairs with
the exact McNemar test. Vote teams are also replayed drawn one voter at a time, stopping at the first passing
program (what `exsc` runs).
Usage: python experiments/public_examples.py [--store S] [--methods sc-cot chain tree complete random]
       [--split test] [--level large] [--threads 2]
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from lemon.benchmarks.base import Item
from lemon.benchmarks.humaneval import code_prompt
from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.errors import run_script
from lemon.evaluation.agent_replies import ReplyGrader
from lemon.evaluation.report import mcnemar_exact
from lemon.evaluation.store import ResultsStore, RunInfo
from lemon.extract import humaneval_program
from lemon.paths import lemon_home
from lemon.runtime.examples_gate import EXAMPLES_TIMEOUT_S, TaskExamples, task_examples
from lemon.runtime.trace import Trace
from lemon.sandbox.runner import Limits, run_check

BENCHMARK = "humaneval"


def public_examples(item: Item) -> TaskExamples | None:
    """The examples the item's task text shows, read as the runtime's `examples` gate reads them (None: none)."""
    return task_examples(code_prompt(item))


def passes_examples(code: str, item: Item, examples: TaskExamples) -> bool:
    """Whether `code` (a reply's program, as the benchmark's extractor reads it) passes `examples`, run like the
    upstream tests: two sandboxes, the examples' process calling the candidate through a pipe."""
    program = humaneval_program(code, item.meta["prompt"], examples.entry)
    return run_check(program, examples.code, examples.test(), examples.entry,
                     Limits(timeout_s=EXAMPLES_TIMEOUT_S)).passed


def candidates(trace: Trace) -> list[str]:
    """The agents in the rule's order: the output first, then the spec's agents."""
    output = trace.topology.get("output", "")
    names = [a["name"] for a in trace.topology.get("agents", [])]
    return [output, *[n for n in names if n != output]]


def chosen(order: Sequence[str], codes: Mapping[str, str | None], passing: Mapping[str, bool]) -> str:
    """The first agent in `order` whose program passes the public examples; the output (`order[0]`) if none."""
    return next((a for a in order if codes.get(a) is not None and passing.get(a)), order[0])


class ExampleRunner:
    """Each distinct (item, program) run on the item's public examples once, `threads` at a time."""

    def __init__(self, threads: int) -> None:
        self.threads, self.passed = threads, dict[tuple[str, str], bool]()

    def run(self, jobs: Sequence[tuple[Item, str]]) -> None:
        """Run the jobs not yet run (an item without examples has nothing to run); each item's examples are read
        once."""
        shown = {item.id: public_examples(item) for item, _ in jobs}
        todo = {(item.id, code): (item, found) for item, code in jobs
                if (item.id, code) not in self.passed and (found := shown[item.id]) is not None}
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            verdicts = pool.map(lambda key: passes_examples(key[1], *todo[key]), todo)
            self.passed.update(zip(todo, verdicts, strict=True))


def latest_run(store: ResultsStore, method: str, split: str, level: str) -> RunInfo | None:
    """The newest HumanEval run of `method` at `level` on `split` (the report's row for it)."""
    found = [r for r in store.runs() if (r.benchmark, r.method, r.split, r.level) == (BENCHMARK, method, split, level)]
    return max(found, key=lambda r: r.created) if found else None


def independent_voters(trace: Trace) -> list[str]:
    """The agents that read no other agent, in the spec's order, when every non-output agent is one (a vote
    team); else []: only such a team can be drawn one agent at a time."""
    voters = [a for a in trace.topology.get("agents", []) if a["name"] != trace.topology.get("output")]
    return [a["name"] for a in voters] if all(not a.get("depends_on") for a in voters) else []


def stop_at_first_pass(voters: Sequence[str], passing: Mapping[str, bool], output: str,
                       tokens: Mapping[str, Mapping[str, int]]) -> tuple[str, int]:
    """The team drawn one voter at a time, stopping at the first program that passes the public examples:
    (the answering agent, the tokens spent). None passes: every voter was drawn and the output answers."""
    spent = 0
    for name in voters:
        spent += tokens.get(name, {}).get("prompt", 0) + tokens.get(name, {}).get("completion", 0)
        if passing.get(name):
            return name, spent
    return output, spent


def study_run(store: ResultsStore, run: RunInfo, items: Mapping[str, Item],
              runner: ExampleRunner) -> dict[tuple[str, int], dict[str, float]]:
    """Per (item, seed) pair with two replies or more: the output's, the rule's and (vote teams) the stop
    rule's answers graded by the upstream tests, the stop rule's tokens, and whether some agent passed."""
    bench, rows = get_benchmark(BENCHMARK), {(r.item_id, r.seed): r for r in store.items(run.run_id)}
    pairs = [(key, items[key[0]], trace) for key, trace in store.traces(run.run_id, rows).items()
             if key[0] in items]
    pairs = [(key, item, trace) for key, item, trace in pairs if len(trace.contents) >= 2]
    codes = [{a: bench.extract(t or "", item) for a, t in trace.contents.items()} for _, item, trace in pairs]
    runner.run([(item, c) for (_, item, _), got in zip(pairs, codes, strict=True) for c in got.values() if c])
    graded = ReplyGrader(bench, runner.threads).grade([(item, trace.contents) for _, item, trace in pairs])
    found = {}
    for (key, item, trace), got, right in zip(pairs, codes, graded, strict=True):
        order = candidates(trace)
        passing = {a: bool(c) and runner.passed.get((item.id, c), False) for a, c in got.items()}
        result = {"output": right.get(order[0], False), "rule": right.get(chosen(order, got, passing), False),
                  "some_agent": any(right.values()), "with_examples": bool(public_examples(item)),
                  "tokens": rows[key].total_tokens}
        if voters := independent_voters(trace):
            stopped, spent = stop_at_first_pass(voters, passing, order[0], rows[key].tokens)
            result |= {"stop": right.get(stopped, False), "stop_tokens": spent}
        found[key] = result
    return found


def summary(method: str, run: RunInfo, found: Mapping[tuple[str, int], Mapping[str, float]],
            baseline: Mapping[tuple[str, int], bool], against: str) -> str:
    """One line: the output, the rule and (vote teams) the stop rule, each paired with the output and with
    `against` on the same pairs."""
    def total(field: str) -> int:
        return sum(int(r[field]) for r in found.values())

    def paired(field: str, other: Mapping[tuple[str, int], bool]) -> str:
        keys = [k for k in found if k in other]
        gained = sum(bool(found[k][field]) and not other[k] for k in keys)
        lost = sum(other[k] and not found[k][field] for k in keys)
        return f"+{gained} -{lost}, p = {mcnemar_exact(gained, lost):.2g}"

    output = {k: bool(r["output"]) for k, r in found.items()}
    n = len(found)
    line = (f"{method} ({run.run_id}) {n} pairs ({total('with_examples')} with public examples): output "
            f"{total('output')} right at {total('tokens') / n:,.0f} tok, some agent right on {total('some_agent')}; "
            f"the rule {total('rule')} ({paired('rule', output)} against the output; {paired('rule', baseline)} "
            f"against {against})")
    if all("stop" in r for r in found.values()):
        line += (f"; one voter at a time, stop at the first passing program: {total('stop')} at "
                 f"{total('stop_tokens') / n:,.0f} tok ({paired('stop', baseline)} against {against})")
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=str(lemon_home() / "six-benchmarks.sqlite"))
    ap.add_argument("--methods", nargs="+", default=["sc-cot", "esc", "asc", "chain", "tree", "complete", "random"])
    ap.add_argument("--split", default="test")
    ap.add_argument("--level", default="large")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--against", default="vanilla", help="the baseline every rule is also paired with")
    args = ap.parse_args()
    store, runner = ResultsStore(args.store), ExampleRunner(args.threads)
    items = {it.id: it for it in load_split(BENCHMARK, args.split)}
    base_run = latest_run(store, args.against, args.split, args.level)
    baseline = {(r.item_id, r.seed): r.correct for r in store.items(base_run.run_id)} if base_run else {}
    for method in args.methods:
        run = latest_run(store, method, args.split, args.level)
        if run is None:
            print(f"{method}: no {BENCHMARK} run at {args.level} on {args.split}", flush=True)
            continue
        print(summary(method, run, study_run(store, run, items, runner), baseline, args.against), flush=True)


if __name__ == "__main__":
    run_script(main)
