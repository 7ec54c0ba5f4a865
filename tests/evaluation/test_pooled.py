"""Pooled paired tests over the benchmarks (`lemon report --pooled A,B`, issue 53): a row of cells against another,
the discordant pairs of each benchmark summed, exact McNemar on the sums; rows are methods, each benchmark's best
fixed baseline, a per-answer-kind rule written out, or the most accurate such rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.errors import LemonError
from lemon.evaluation.pooled import parse_rule
from lemon.evaluation.report import build_report, mcnemar_exact
from lemon.evaluation.store import ResultsStore
from tests.cli.test_cli_core import assert_clean_error, lemon
from tests.evaluation.test_report import _fill

ITEMS = [str(i) for i in range(5)]
PAIRS = [(i, s) for i in ITEMS for s in (0, 1)]  # 10 (item, seed) pairs a cell, in a fixed order
RULE = "number=esc/choice=esc/code=exsc"


def _right(*indices: int) -> dict[tuple[str, int], bool]:
    """The cell's rows: right on the pairs at `indices` of PAIRS, wrong on the others."""
    return {key: k in indices for k, key in enumerate(PAIRS)}


def _store(path: Path) -> None:
    """Four benchmarks of three kinds; AQuA has the template's cell alone (nothing to pair it with)."""
    cells = {  # benchmark: {method: (right pairs, tokens)}
        "gsm8k": {"esc": (range(8), 20), "asc": (range(9), 30), "template": ((*range(6), 9), 25)},
        "svamp": {"esc": (range(9), 20), "asc": (range(8), 30), "template": (range(9), 25)},
        "mmlu": {"esc": (range(5), 20), "asc": (range(6), 30), "template": (range(4), 25)},
        "humaneval": {"esc": (range(7), 20), "asc": (range(7), 30), "exsc": (range(9), 15),
                      "template": (range(9), 25)},
        "aqua": {"template": (range(3), 25)},
    }
    with ResultsStore(path) as store:
        for bench, methods in cells.items():
            for method, (right, tokens) in methods.items():
                _fill(store, f"{bench}-{method}", method, _right(*right), 2, tokens, benchmark=bench, level="large")


def _pooled_row(markdown: str, a: str, b: str) -> str:
    section = markdown[markdown.index(f"### Pooled over the benchmarks: {a} against {b}"):]
    return next(line for line in section.splitlines() if line.startswith("| **pooled**"))


def test_a_per_kind_rule_is_composed_from_the_stores_cells_and_tested_pooled(tmp_path: Path) -> None:
    """The template against esc on numbers and choices and exsc on code: GSM8K 1/2, SVAMP 0/0, MMLU 0/1,
    HumanEval 0/0, summed 1/3; AQuA, where the rule's esc has no cell, is left out and named."""
    _store(tmp_path / "r.sqlite")
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = build_report(store, pooled=[("template", RULE)])
    (result,) = report.pooled
    assert [(p.benchmark, p.a_only, p.b_only, p.left_out) for p in result.parts] == [
        ("mmlu", 0, 1, ""), ("gsm8k", 1, 2, ""), ("aqua", 0, 0, "no cell of B"), ("svamp", 0, 0, ""),
        ("humaneval", 0, 0, "")]
    assert (result.a_only, result.b_only, result.pairs) == (1, 3, 40)
    assert result.p_value == mcnemar_exact(1, 3)
    md = report.markdown
    assert _pooled_row(md, "template", RULE) == \
        f"| **pooled** (4 of 5 benchmarks) | template | {RULE} | 40 | **1/3, p = {mcnemar_exact(1, 3):.2g}** |"
    assert "| humaneval | template | exsc@large | 10 | 0/0 |" in md
    assert md.index("### Pooled over the benchmarks") < md.index("\n## aqua")  # under the cross-benchmark table


def test_best_and_the_most_accurate_per_kind_rule(tmp_path: Path) -> None:
    """`best`: each benchmark's best fixed baseline (asc, esc, asc, exsc: the table's choice); `kinds`: per kind
    the most accurate over its benchmarks, the cheaper on a tie (numbers: esc and asc both 85 %, esc cheaper;
    choice: asc; code: exsc)."""
    _store(tmp_path / "r.sqlite")
    with ResultsStore(tmp_path / "r.sqlite") as store:
        best, kinds = build_report(store, pooled=[("template", "best"), ("template", "kinds")]).pooled
    assert [(p.benchmark, p.b.run.method if p.b else None) for p in best.parts] == [
        ("mmlu", "asc"), ("gsm8k", "asc"), ("aqua", None), ("svamp", "esc"), ("humaneval", "exsc")]
    assert (best.a_only, best.b_only) == (1, 5)  # GSM8K 1/3, MMLU 0/2
    assert [p.b.run.method if p.b else None for p in kinds.parts] == ["asc", "esc", None, "esc", "exsc"]
    assert (kinds.a_only, kinds.b_only) == (1, 4)  # GSM8K 1/2, MMLU 0/2


@pytest.mark.parametrize("rule", ["numbr=esc", "number=esc/number=asc", "number", "number=", "essay=cot"])
def test_a_bad_per_kind_rule_is_one_line(rule: str) -> None:
    with pytest.raises(LemonError, match=r"^--pooled: .* is not a per-kind rule: .*number=esc/choice=esc/code=exsc$"):
        parse_rule(rule)


def test_a_row_that_names_nothing_or_two_cells_is_one_line(tmp_path: Path) -> None:
    _store(tmp_path / "r.sqlite")
    with ResultsStore(tmp_path / "r.sqlite") as store:
        with pytest.raises(LemonError, match=r"no cell of 'nope'; rows: template, esc@large, asc@large, exsc@large"):
            build_report(store, pooled=[("template", "nope")])
        _fill(store, "gsm8k-esc-m", "esc", _right(1), 2, 20, benchmark="gsm8k", level="medium")
        with pytest.raises(LemonError, match=r"'esc' names 2 cells of gsm8k \(esc@large, esc@medium\)"):
            build_report(store, pooled=[("template", "esc")])
        assert build_report(store, pooled=[("template", "esc@large")]).pooled[0].b_only == 3  # a label is one


def test_the_command_prints_the_pooled_test_and_a_bad_row_exits_2(tmp_path: Path) -> None:
    _store(tmp_path / "r.sqlite")
    out = tmp_path / "report.md"
    proc = lemon("report", "--store", str(tmp_path / "r.sqlite"), "--file", str(out), "--pooled", f"template,{RULE}",
                 home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _pooled_row(out.read_text(), "template", RULE).endswith(f"**1/3, p = {mcnemar_exact(1, 3):.2g}** |")
    for bad, said in (("template", "joined by a comma"), ("template,numbr=esc", "is not a per-kind rule")):
        assert_clean_error(lemon("report", "--store", str(tmp_path / "r.sqlite"), "--pooled", bad, home=tmp_path),
                           said)
