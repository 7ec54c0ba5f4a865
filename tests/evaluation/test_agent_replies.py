"""Where a team's answer was lost: each agent's stored reply graded with the benchmark's own grader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from lemon.benchmarks.base import Item
from lemon.benchmarks.registry import get_benchmark, load_split
from lemon.evaluation.agent_replies import ReplyGrader, ReplyTally, graded_replies, tally_pair
from lemon.evaluation.report import build_report
from lemon.evaluation.store import ItemRow, ResultsStore

CHAIN = {"agents": [{"name": "solver", "role": "math_solver", "capacity": "large", "depends_on": []},
                    {"name": "checker", "role": "critic", "capacity": "large", "depends_on": ["solver"]},
                    {"name": "final", "role": "final_decision_maker", "capacity": "large", "depends_on": ["checker"]}],
         "output": "final"}


def _items(data_dir: Path, benchmark: str, n: int = 3) -> list[Item]:
    return load_split(benchmark, get_benchmark(benchmark).default_split, data_dir)[:n]


def test_replies_are_graded_by_the_benchmark_s_own_extractor_and_grader(data_dir: Path) -> None:
    gsm, aqua = _items(data_dir, "gsm8k", 1)[0], _items(data_dir, "aqua", 1)[0]
    graded = graded_replies(get_benchmark("gsm8k"), gsm, {"a": f"So 2 + 2.\nThe answer is {gsm.answer}.",
                                                         "b": "The answer is 123456789.", "c": ""})
    assert graded == {"a": True, "b": False, "c": False}
    # a choice reply naming the option's text, not its letter, reads as that option (as the output is graded)
    gold_text = aqua.choices["ABCDE".index(aqua.answer)]
    wrong = next(letter for letter in "ABCDE"[:len(aqua.choices)] if letter != aqua.answer)
    assert graded_replies(get_benchmark("aqua"), aqua, {"x": f"The answer is {gold_text}",
                                                        "y": f"The answer is ({wrong})."}) == {"x": True, "y": False}


@given(st.lists(st.tuples(st.dictionaries(st.sampled_from(["a", "b", "out"]), st.booleans(), min_size=2),
                          st.booleans()), max_size=30))
def test_every_pair_is_right_lost_or_unanswered(pairs: list[tuple[dict[str, bool], bool]]) -> None:
    tally = ReplyTally()
    for graded, right in pairs:
        tally = tally_pair(tally, graded, "out", right)
    assert tally.pairs == len(pairs) == tally.output_right + tally.lost + tally.none_right
    assert tally.some_other_right == tally.lost + tally.output_right - tally.alone
    assert sum(tally.agent_replies.values()) == sum(len(g) for g, _ in pairs)
    assert sum(tally.agent_right.values()) == sum(sum(g.values()) for g, _ in pairs)


def _chain_row(item: Item, replies: dict[str, str], correct: bool) -> ItemRow:
    trace = {"topology": CHAIN, "events": [], "contents": replies}
    tokens = {a: {"prompt": 10, "completion": 5, "capacity": "large", "model": "m"} for a in replies}
    return ItemRow(item_id=item.id, seed=0, prediction=None, gold=item.answer, correct=correct,
                   tokens=tokens, total_tokens=15 * len(replies), latency_s=0.0, trace_id=None,  # type: ignore[arg-type]
                   status="ok", trace_json=json.dumps(trace))


def _program(item: Item, body: str | None = None) -> str:
    """A reply holding a whole program for a HumanEval item: its canonical solution, or `body`."""
    return f"```python\n{item.meta['prompt']}{body or item.meta['canonical_solution']}```"


def test_code_replies_are_run_in_the_sandbox_and_a_broken_rewrite_counts_as_lost(tmp_path: Path,
                                                                                 data_dir: Path) -> None:
    """The topologies' question on code: did the first program pass and a later agent break it?"""
    right, broken = _items(data_dir, "humaneval", 2)
    with ResultsStore(tmp_path / "r.sqlite") as store:
        store.ensure_run("chain", benchmark="humaneval", split="test", method="chain", pool="cpu", level="large",
                         seeds=1, n_items=2, config={})
        store.put("chain", _chain_row(right, {"solver": _program(right), "checker": "Looks fine.",
                                             "final": _program(right)}, True))
        store.put("chain", _chain_row(broken, {"solver": _program(broken), "checker": "Rewrite it.",
                                              "final": _program(broken, "    return None\n")}, False))
        markdown = build_report(store, replies=True, data_dir=data_dir).markdown
    row = next(line for line in markdown.split("### Where the answer was lost (humaneval")[1].splitlines()
               if line.startswith("| chain | test |"))
    assert "| 2 | 1 (50.0 %) | 2 | **1** | 0 | 0 | 50.0 % | solver 2/2 | `chain` |" in row


class _CountingBenchmark:
    """Test double: a benchmark whose checker counts its calls (and says it is sandboxed)."""

    def __init__(self, inner: object) -> None:
        self.inner, self.checks, self.sandboxed = inner, 0, True

    def extract(self, text: str, item: Item) -> str | None:
        return self.inner.extract(text, item)  # type: ignore[attr-defined]

    def check(self, prediction: str, item: Item) -> bool:
        self.checks += 1
        return self.inner.check(prediction, item)  # type: ignore[attr-defined]


def test_each_distinct_answer_is_checked_once_across_runs(data_dir: Path) -> None:
    first, second = _items(data_dir, "gsm8k", 2)
    bench = _CountingBenchmark(get_benchmark("gsm8k"))
    grader = ReplyGrader(bench, threads=2)  # type: ignore[arg-type]
    same = {"a": f"The answer is {first.answer}.", "b": f"So it is {first.answer}", "c": "no number"}
    assert grader.grade([(first, same), (second, same)]) == [{"a": True, "b": True, "c": False},
                                                            {"a": False, "b": False, "c": False}]
    assert bench.checks == 2  # one answer per item; "c" has none to check
    assert grader.grade([(first, {"x": "It is " + first.answer})]) == [{"x": True}]
    assert bench.checks == 2  # a later run's same answer is not checked again


def _store(path: Path, data_dir: Path) -> Path:
    """A chain run on three GSM8K items: right throughout, lost at the output, and never found."""
    kept, lost, never = _items(data_dir, "gsm8k")
    right = {i.id: f"The answer is {i.answer}." for i in (kept, lost, never)}
    with ResultsStore(path) as store:
        store.ensure_run("chain", benchmark="gsm8k", split="test", method="chain", pool="cpu", level="large",
                         seeds=1, n_items=3, config={})
        store.put("chain", _chain_row(kept, dict.fromkeys(("solver", "checker", "final"), right[kept.id]), True))
        store.put("chain", _chain_row(lost, {"solver": right[lost.id], "checker": "Looks fine.",
                                             "final": "The answer is 987654321."}, False))
        store.put("chain", _chain_row(never, dict.fromkeys(("solver", "checker", "final"), "The answer is 987654321."),
                                      False))
    return path


def test_report_splits_the_output_s_misses_into_lost_and_never_found(tmp_path: Path, data_dir: Path) -> None:
    with ResultsStore(_store(tmp_path / "r.sqlite", data_dir)) as store:
        plain = build_report(store).markdown
        markdown = build_report(store, replies=True, data_dir=data_dir).markdown
    assert "Where the answer was lost" not in plain  # only when asked: it reads the benchmark's items
    section = markdown.split("### Where the answer was lost (gsm8k")[1]
    row = next(line for line in section.splitlines() if line.startswith("| chain | test |"))
    # pairs | output right | some other right | lost | right alone | none | others' replies right | best agent
    assert "| 3 | 1 (33.3 %) | 2 | **1** | 0 | 1 | 50.0 % | solver 2/3 | `chain` |" in row


def test_report_replies_with_missing_data_exits_2_with_the_fix(tmp_path: Path, data_dir: Path,
                                                               _isolated_home: Path) -> None:
    store = _store(tmp_path / "r.sqlite", data_dir)
    done = subprocess.run([sys.executable, "-m", "lemon.cli.main", "report", "--store", str(store), "--replies",
                           "--data-dir", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LEMON_HOME": str(_isolated_home), "COLUMNS": "200"})
    assert done.returncode == 2, done.stderr
    assert "missing" in done.stderr and "--data-dir" in done.stderr and "Traceback" not in done.stderr
