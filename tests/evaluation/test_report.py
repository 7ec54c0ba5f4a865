"""Report: mean ± std over seeds, exact McNemar on a known table, markdown and PNG output."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lemon.errors import LemonError
from lemon.evaluation.report import build_report, dominated_by, dominates, mcnemar_exact, paired_compare, run_stats
from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.llm.models import parameters_b
from tests.cli.test_cli_core import assert_clean_error, lemon


def test_mcnemar_exact_known_values() -> None:
    # b=5, c=1: p = 2 * (C(6,0)+C(6,1)) / 2^6 = 2 * 7/64
    assert mcnemar_exact(5, 1) == pytest.approx(14 / 64)
    assert mcnemar_exact(1, 5) == pytest.approx(14 / 64)
    assert mcnemar_exact(0, 7) == pytest.approx(2 / 128)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(12, 12) == 1.0
    # b=10, c=3 (13 discordant): 2 * sum_{i<=3} C(13,i) / 2^13 = 2 * 378 / 8192
    assert mcnemar_exact(10, 3) == pytest.approx(2 * 378 / 8192)


def test_mcnemar_matches_scipy() -> None:
    from scipy import stats
    for b, c in [(3, 9), (17, 30), (1, 0), (40, 22)]:
        assert mcnemar_exact(b, c) == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue, rel=1e-9)


def _row(item: str, seed: int, correct: bool, tokens: int = 10) -> ItemRow:
    return ItemRow(item_id=item, seed=seed, prediction="x", gold="x", correct=correct, tokens={},
                   total_tokens=tokens, latency_s=0.0, trace_id=None, status="ok")


def _fill(store: ResultsStore, run_id: str, method: str, table: dict[tuple[str, int], bool], seeds: int,
          tokens: int, benchmark: str = "gsm8k", level: str = "medium", pool: str = "tiny") -> None:
    store.ensure_run(run_id, benchmark=benchmark, split="test", method=method, pool=pool, level=level,
                     seeds=seeds, n_items=len({i for i, _ in table}), config={"temperature": 0.7})
    for (item, seed), ok in table.items():
        store.put(run_id, _row(item, seed, ok, tokens))


def test_paired_table_counts() -> None:
    a = [_row(str(i), 0, ok) for i, ok in enumerate([1, 1, 1, 0, 0, 1, 1, 0])]
    b = [_row(str(i), 0, ok) for i, ok in enumerate([1, 0, 0, 0, 1, 0, 1, 0])]
    run = RunInfo("r", "gsm8k", "test", "cot", "tiny", "medium", 1, 8, {}, 0.0, 0.0)
    res = paired_compare(run, a, run, b)
    assert (res.both_right, res.a_only, res.b_only, res.both_wrong) == (2, 3, 1, 2)
    assert res.discordant == 4 and res.p_value == pytest.approx(mcnemar_exact(3, 1))


def test_report_mean_std_table_compare_and_png(tmp_path: Path) -> None:
    store_path = tmp_path / "r.sqlite"
    with ResultsStore(store_path) as store:
        # cot: per-seed accuracy 0.75, 0.5, 1.0 -> mean 0.75, sample std 0.25
        cot = {(str(i), s): ok for s, oks in enumerate([[1, 1, 1, 0], [1, 0, 1, 0], [1, 1, 1, 1]])
               for i, ok in enumerate(oks)}
        vanilla = {(str(i), s): ok for s, oks in enumerate([[0, 1, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0]])
                   for i, ok in enumerate(oks)}
        _fill(store, "run_cot", "cot", {k: bool(v) for k, v in cot.items()}, 3, 120)
        _fill(store, "run_van", "vanilla", {k: bool(v) for k, v in vanilla.items()}, 3, 40)
        _fill(store, "run_one", "cot", {("0", 0): True, ("1", 0): False}, 1, 50, benchmark="svamp")
        stats = {s.run.run_id: s for s in (run_stats(r, store.items(r.run_id)) for r in store.runs())}
        assert stats["run_cot"].accuracy_mean == pytest.approx(0.75)
        assert stats["run_cot"].accuracy_std == pytest.approx(0.25)
        assert stats["run_one"].accuracy_std is None
        report = build_report(store, out=tmp_path / "docs" / "results.md", plot=tmp_path / "docs" / "acc.png",
                              compare=[("cot", "vanilla")], now=datetime(2026, 1, 2, 3, 4, tzinfo=UTC))
    md = (tmp_path / "docs" / "results.md").read_text()
    assert md == report.markdown
    assert str(store_path) in md and "2026-01-02 03:04 UTC" in md
    assert "## gsm8k" in md and "## svamp" in md
    assert "75.00 ± 25.00" in md and "50.00 ± n/a" in md
    assert "| tiny | medium |" in md
    gsm8k = md.split("## gsm8k")[1].split("## svamp")[0]
    assert gsm8k.index("| vanilla |") < gsm8k.index("| cot |")  # baselines in their documented order
    # paired: cot right/vanilla wrong and the reverse, over the 12 (item, seed) pairs
    (cmp,) = report.comparisons
    a_only = sum(cot[k] and not vanilla[k] for k in cot)
    b_only = sum(vanilla[k] and not cot[k] for k in cot)
    assert (cmp.pairs, cmp.a_only, cmp.b_only) == (12, a_only, b_only)
    assert f"{a_only + b_only} discordant pairs" in md and "Exact McNemar" in md
    assert f"p = {mcnemar_exact(a_only, b_only):.4g}" in md
    png = (tmp_path / "docs" / "acc.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_compare_unknown_method_is_a_one_line_error(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as store:
        _fill(store, "run_cot", "cot", {("0", 0): True}, 1, 10)
        with pytest.raises(LemonError, match="methods stored: cot"):
            build_report(store, compare=[("cot", "tree")])


def test_report_fills_only_the_marked_block_of_a_hand_written_document(tmp_path: Path) -> None:
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n\nHow it was run.\n\n<!-- lemon report: begin -->\nold table\n"
                   "<!-- lemon report: end -->\n\n## Other measurements\nkept\n")
    with ResultsStore(tmp_path / "r.sqlite") as store:
        _fill(store, "run_cot", "cot", {("0", 0): True, ("1", 0): False}, 1, 10)
        build_report(store, out=doc)
        build_report(store, out=doc)  # idempotent: the marks survive a second write
    text = doc.read_text()
    assert text.startswith("# Results\n\nHow it was run.\n\n<!-- lemon report: begin -->\n## LEMON evaluation")
    assert "old table" not in text and text.count("<!-- lemon report: begin -->") == 1
    assert "\n### gsm8k\n" in text and "| cot |" in text  # headings demoted under the document's own
    assert text.endswith("<!-- lemon report: end -->\n\n## Other measurements\nkept\n")


def test_empty_store_report(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = build_report(store, plot=tmp_path / "p.png")
    assert "no runs yet" in report.markdown and (tmp_path / "p.png").exists()


def test_compare_with_best_pairs_each_run_with_the_most_accurate_other_method(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as store:
        items = [str(i) for i in range(6)]
        _fill(store, "v", "vanilla", {(i, 0): k < 1 for k, i in enumerate(items)}, 1, 10)
        _fill(store, "c", "cot", {(i, 0): k < 3 for k, i in enumerate(items)}, 1, 10)
        _fill(store, "t", "tree", {(i, 0): k < 5 for k, i in enumerate(items)}, 1, 40)
        report = build_report(store, compare=[("vanilla", "best")])
    (pair,) = report.comparisons
    assert pair.run_a.method == "vanilla" and pair.run_b.method == "tree"  # in the order asked: A, then B
    assert (pair.a_only, pair.b_only) == (0, 4)


def test_best_is_the_most_accurate_fixed_baseline_at_any_level_for_a_method_that_picks_levels(tmp_path: Path
                                                                                              ) -> None:
    """Issue 25: the template is stored under a nominal level (`medium`), so `template,best` found no partner
    among the `large` baselines; and `best` means a fixed team, never another orchestrator."""
    with ResultsStore(tmp_path / "r.sqlite") as store:
        items = [str(i) for i in range(6)]
        _fill(store, "tmpl0001", "template", {(i, 0): k < 4 for k, i in enumerate(items)}, 1, 30)
        _fill(store, "trained1", "trained:/p", {(i, 0): True for i in items}, 1, 30)
        _fill(store, "sclarge1", "sc-cot", {(i, 0): k < 5 for k, i in enumerate(items)}, 1, 10, level="large")
        report = build_report(store, compare=[("template", "best")])
    (pair,) = report.comparisons
    assert (pair.run_a.method, pair.run_b.method) == ("template", "sc-cot")
    assert (pair.a_only, pair.b_only) == (0, 1)


def test_two_runs_named_by_id_pair_across_levels_but_methods_do_not(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.sqlite") as store:
        items = [str(i) for i in range(6)]
        _fill(store, "tmpl0001", "template", {(i, 0): True for i in items}, 1, 30)
        _fill(store, "cotlarge", "cot", {(i, 0): k < 4 for k, i in enumerate(items)}, 1, 10, level="large")
        report = build_report(store, compare=[("tmpl0001", "cotlarge")])
        with pytest.raises(LemonError, match="no two runs share"):
            build_report(store, compare=[("template", "cot")])
    (pair,) = report.comparisons
    assert (pair.pairs, pair.a_only, pair.b_only) == (6, 2, 0)
    assert "### Paired test: template vs cot@large (test, pool tiny)" in report.markdown


def test_cli_compare_is_repeatable_and_a_bad_pair_exits_2(tmp_path: Path) -> None:
    store_path = tmp_path / "r.sqlite"
    with ResultsStore(store_path) as store:
        items = [str(i) for i in range(6)]
        _fill(store, "v", "vanilla", {(i, 0): k < 1 for k, i in enumerate(items)}, 1, 10)
        _fill(store, "c", "cot", {(i, 0): k < 3 for k, i in enumerate(items)}, 1, 10)
        _fill(store, "t", "tree", {(i, 0): k < 5 for k, i in enumerate(items)}, 1, 40)
    out = tmp_path / "report.md"
    proc = lemon("report", "--store", str(store_path), "--out", str(out), "--compare", "cot,vanilla",
                 "--compare", "vanilla,best", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    md = out.read_text()
    assert "Paired test: cot vs vanilla" in md and "Paired test: vanilla vs tree" in md
    assert md.index("cot vs vanilla") < md.index("vanilla vs tree")  # in the order asked, each pair as given
    assert_clean_error(lemon("report", "--store", str(store_path), "--compare", "cot", home=tmp_path),
                       "joined by a comma")


def test_front_names_the_runs_both_more_accurate_and_cheaper(tmp_path: Path) -> None:
    """Issue 10's acceptance (no fixed baseline both more accurate and cheaper) read off the report."""
    items = [str(i) for i in range(8)]

    def table(n_right: int, seeds: int = 2) -> dict[tuple[str, int], bool]:
        return {(i, s): k < n_right for s in range(seeds) for k, i in enumerate(items)}

    with ResultsStore(tmp_path / "r.sqlite") as store:
        _fill(store, "cheap", "vanilla", table(7), 2, 280)
        _fill(store, "tied", "cot", table(7), 2, 300)        # as accurate as vanilla, dearer: dominated (Pareto)
        _fill(store, "worse", "chain", table(5), 2, 290)     # vanilla is more accurate AND cheaper
        _fill(store, "best", "sc-cot", table(8), 2, 900)     # most accurate: on the front whatever it costs
        _fill(store, "other", "tree", table(2, seeds=1), 1, 10)  # other seeds: not comparable
        store.ensure_run("part", benchmark="gsm8k", split="test", method="random", pool="tiny", level="medium",
                         seeds=2, n_items=8, config={})
        store.put("part", _row("0", 0, True, 5))             # partial: judged by nobody, judges nobody
        report = build_report(store)
        stats = {s.run.run_id: s for s in report.stats}
    beaten = dominated_by(list(stats.values()))
    assert {k: [q.run.run_id for q in v] for k, v in beaten.items()} == {
        "cheap": [], "tied": ["cheap"], "worse": ["cheap"], "best": [], "other": []}
    front = report.markdown.split("Accuracy-tokens front (test, pool tiny, 8 items x 2 seeds)")[1]
    assert "| chain | medium | 62.50 ± 0.00 | 290.0 | 0.0 | 290.0 | n/a | no: dominated by vanilla@medium |" in front
    assert front.count("**on the front**") == 2 and "| random |" not in front and "| tree |" not in front


points = st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), min_size=1, max_size=12)


@given(points)
def test_the_front_is_exactly_the_points_no_other_point_dominates(pts: list[tuple[int, int]]) -> None:
    """The standard Pareto rule: nothing on the front is dominated, everything off it is dominated by a point
    ON the front, and equal points never dominate each other."""
    front = [p for p in pts if not any(dominates(q, p) for q in pts)]
    assert front
    for p in pts:
        assert not dominates(p, p)
        if p not in front:
            assert any(dominates(q, p) for q in front)
    for a in front:
        assert not any(dominates(b, a) for b in front)


def test_cost_counts_the_orchestrator_and_sizes_come_from_model_names() -> None:
    assert dominates((0.9, 100.0), (0.9, 101.0)) and not dominates((0.9, 100.0), (0.95, 120.0))
    assert parameters_b("embedded:qwen2.5-coder-1.5b") == 1.5 and parameters_b("embedded:smollm2-135m") == 0.135
    assert parameters_b("Qwen/Qwen2.5-32B-Instruct") == 32 and math.isnan(parameters_b("scripted-large"))


def test_each_benchmark_shows_the_papers_number_for_orientation_only(tmp_path: Path) -> None:
    """paper.yaml names exactly the six benchmarks, and each benchmark's section of the report carries its
    number (a benchmark the paper did not report on gets no such line)."""
    from lemon.benchmarks.registry import BENCHMARKS
    from lemon.evaluation.report import paper_results

    assert set(paper_results()["lemon"]) == set(BENCHMARKS)
    with ResultsStore(tmp_path / "r.sqlite") as store:
        _fill(store, "run_g", "cot", {("0", 0): True}, 1, 10, benchmark="gsm8k")
        _fill(store, "run_t", "cot", {("0", 0): True}, 1, 10, benchmark="toy")
        md = build_report(store, now=datetime(2026, 1, 2, tzinfo=UTC)).markdown
    gsm8k, toy = md.split("## gsm8k")[1].split("## toy")
    assert "the paper reports LEMON at 94.32 % on gsm8k test (1,319 items) with Qwen2.5 7B/14B/32B workers" in gsm8k
    assert "not comparable" in gsm8k and "the paper reports" not in toy


def test_the_cross_benchmark_table_names_split_items_and_seeds_in_every_cell(tmp_path: Path) -> None:
    """Issue 25: one row per method, one column per benchmark in the paper's order, a missing cell is a dash,
    a partial run says so, and the paper's numbers close the table; one benchmark alone gets no such table."""
    with ResultsStore(tmp_path / "r.sqlite") as store:
        items = [str(i) for i in range(4)]
        _fill(store, "g1", "cot", {(i, s): k < 2 + s for k, i in enumerate(items) for s in (0, 1)}, 2, 100)
        alone = build_report(store).markdown
        _fill(store, "s1", "cot", {(i, 0): True for i in items}, 1, 50, benchmark="svamp")
        _fill(store, "s2", "vanilla", {(i, 0): True for i in items[:3]}, 1, 40, benchmark="svamp")
        store.ensure_run("s2", benchmark="svamp", split="test", method="vanilla", pool="tiny", level="medium",
                         seeds=1, n_items=4, config={"temperature": 0.7})
        markdown = build_report(store).markdown
    assert "## All benchmarks" not in alone
    table = markdown[markdown.index("## All benchmarks"):markdown.index("\n## gsm8k")]
    assert "| method | gsm8k | svamp |" in table  # the paper's order: gsm8k before svamp
    assert "| cot@medium | 62.5 ± 17.7 % at 100 tok (test, 4 x 2) | 100.0 % at 50 tok (test, 4 x 1) |" in table
    assert "| vanilla@medium | – | 100.0 % at 40 tok (test, 3 x 1, partial 3/4 rows) |" in table
    assert "| paper: LEMON, Qwen2.5 7B/14B/32B workers (orientation only) | 94.3 % (test, 1,319) |" in table


def test_the_cross_benchmark_table_pairs_every_cell_with_its_columns_best_fixed_baseline(tmp_path: Path) -> None:
    """Issue 25's paired tests against the best baseline, for every method and benchmark: the best is a fixed
    baseline (never the template), the cheaper of two equally accurate ones, and a complete run before a
    partial one; a cell sharing fewer pairs with the best says how many."""
    with ResultsStore(tmp_path / "r.sqlite") as store:
        items = [str(i) for i in range(6)]
        _fill(store, "v", "vanilla", {(i, 0): k < 1 for k, i in enumerate(items)}, 1, 10)
        _fill(store, "c", "chain", {(i, 0): k < 5 for k, i in enumerate(items)}, 1, 40)  # listed before tree
        _fill(store, "t", "tree", {(i, 0): k < 5 for k, i in enumerate(items)}, 1, 30)
        _fill(store, "tmpl0001", "template", {(i, 0): True for i in items}, 1, 30)
        _fill(store, "s1", "cot", {(i, 0): k < 3 for k, i in enumerate(items[:4])}, 1, 50, benchmark="svamp")
        _fill(store, "s2", "vanilla", {(i, 0): True for i in items[:3]}, 1, 40, benchmark="svamp")
        store.ensure_run("s2", benchmark="svamp", split="test", method="vanilla", pool="tiny", level="medium",
                         seeds=1, n_items=4, config={"temperature": 0.7})
        markdown = build_report(store).markdown
    paired = markdown[markdown.index("### Paired with the best"):markdown.index("\n## gsm8k")]
    assert "| best fixed baseline | tree@medium | cot@medium |" in paired
    assert "| tree@medium | **best** | – |" in paired
    assert "| chain@medium | 0/0, p = 1 | – |" in paired
    assert f"| vanilla@medium | 0/4, p = {mcnemar_exact(0, 4):.2g} | 0/0, p = 1 (3 pairs) |" in paired
    assert "| template | 1/0, p = 1 | – |" in paired
    assert "| cot@medium | – | **best** |" in paired


def test_a_cell_that_shares_no_pair_with_its_columns_best_is_not_comparable(tmp_path: Path) -> None:
    """Issue 55: the trained policies' HumanEval cells read "0/0, p = 1" against exsc, 83.3 % against 93.3 %.
    A paired count is over the same (item, seed) of the two runs it names: a run on other items (another
    store's ids) or on another pool has none to count, and says so instead of a count of nothing."""
    with ResultsStore(tmp_path / "r.sqlite") as store:
        items = [str(i) for i in range(6)]
        _fill(store, "best", "exsc", {(i, s): k < 5 for k, i in enumerate(items) for s in (0, 1)}, 2, 50)
        _fill(store, "pol", "trained:p", {(f"x{i}", s): k < 4 for k, i in enumerate(items) for s in (0, 1)}, 2, 60)
        _fill(store, "other", "cot", {(i, s): k < 2 for k, i in enumerate(items) for s in (0, 1)}, 2, 20,
              pool="cpu")
        _fill(store, "tmpl0001", "template", {(i, s): k < 5 for k, i in enumerate(items) for s in (0, 1)}, 2, 40)
        _fill(store, "s1", "cot", {(i, 0): True for i in items}, 1, 50, benchmark="svamp")
        markdown = build_report(store).markdown
    paired = markdown[markdown.index("### Paired with the best"):markdown.index("\n## gsm8k")]
    assert "| best fixed baseline | exsc@medium | cot@medium |" in paired
    assert "| trained:p | not comparable (no shared (item, seed) pairs) | – |" in paired
    assert "| cot@medium | not comparable (pool cpu, not tiny) | **best** |" in paired
    assert "| template | 0/0, p = 1 | – |" in paired  # shared pairs, none discordant: a real 0/0


def test_a_cell_whose_workers_had_another_reply_limit_says_so(tmp_path: Path) -> None:
    """The six-benchmark table gives AQuA's workers 1,024 tokens (at 384 most CoT replies were cut): its cells
    must not read like the others'."""
    with ResultsStore(tmp_path / "r.sqlite") as store:
        _fill(store, "g1", "cot", {("0", 0): True}, 1, 100)
        store.ensure_run("a1", benchmark="aqua", split="test", method="cot", pool="tiny", level="medium", seeds=1,
                         n_items=1, config={"temperature": 0.7, "max_tokens": 1024})
        store.put("a1", _row("0", 0, True, 900))
        markdown = build_report(store).markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| cot@medium |"))
    assert row == ("| cot@medium | 100.0 % at 100 tok (test, 1 x 1) | "
                   "100.0 % at 900 tok (test, 1 x 1, replies <= 1,024 tok) |")


def _agents_row(completions: list[int]) -> ItemRow:
    tokens = {f"a{i}": {"prompt": 5, "completion": n, "capacity": "large"} for i, n in enumerate(completions)}
    return ItemRow(item_id="i", seed=0, prediction="x", gold="x", correct=False, tokens=tokens,  # type: ignore[arg-type]
                   total_tokens=sum(completions) + 5 * len(completions), latency_s=0.0, trace_id=None, status="ok")


def test_replies_at_the_limit_are_counted_against_the_runs_own_limit_or_its_pools() -> None:
    """AQuA at 384 was measured by the limit (151 of 300 voters cut) and nothing in the report said so: each run
    now counts the worker replies that stopped at its reply limit, and says "?" where that limit is unknown."""
    rows = [_agents_row([64, 10, 0]), _agents_row([64, 64])]  # agents of 0 tokens wrote no reply (a vote rule)
    own = RunInfo("r", "aqua", "test", "sc-cot", "cpu", "large", 1, 2, {"max_tokens": 64}, 0.0, 0.0)
    stats = run_stats(own, rows)
    assert (stats.replies, stats.reply_limit, stats.replies_at_limit) == (4, 64, 3)
    pool_default = RunInfo("r", "aqua", "test", "sc-cot", "cpu", "large", 1, 2, {"pool_identity": "cpu"}, 0.0, 0.0)
    at_384 = [_agents_row([384, 383]), _agents_row([400])]
    assert run_stats(pool_default, at_384).replies_at_limit == 2
    a_file = RunInfo("r", "aqua", "test", "sc-cot", "p.yaml", "large", 1, 2, {"pool_identity": "file:ab"}, 0.0, 0.0)
    assert run_stats(a_file, at_384).replies_at_limit is None and run_stats(a_file, at_384).replies == 3


def test_a_cell_whose_replies_were_often_cut_says_what_share(tmp_path: Path) -> None:
    """The cross-benchmark table is what gets quoted: a cell where a tenth or more of the worker replies stopped
    at the limit says so there, and one under that share stays as it was."""
    with ResultsStore(tmp_path / "r.sqlite") as store:
        for run_id, bench, completions in (("g", "gsm8k", [384, 200, 150, 384, 100]),  # 2 of 5 cut
                                           ("s", "svamp", [384] + [100] * 10)):          # 1 of 11 cut
            store.ensure_run(run_id, benchmark=bench, split="test", method="cot", pool="cpu", level="large",
                             seeds=1, n_items=1, config={"temperature": 0.7, "pool_identity": "cpu"})
            store.put(run_id, dataclasses.replace(_agents_row(completions), correct=True))
        markdown = build_report(store).markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| cot@large |"))
    assert "(test, 1 x 1, 40 % of replies cut) |" in row
    assert row.endswith("(test, 1 x 1) |")
    svamp = markdown[markdown.index("## svamp"):]
    assert "| 1 of 11 at 384 |" in svamp
