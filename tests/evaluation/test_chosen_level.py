"""A method that picks each agent's level (`template`, `prompted`, `trained:PATH`) is stored under a nominal
level (`medium`, so its run ids stay stable); issue 25: `lemon runs`, `lemon report` and the viewer showed that
`medium` as if the method ran there. They show "chosen by the method"; a fixed baseline keeps its level."""

from __future__ import annotations

from pathlib import Path

from lemon.cli.view_cmds import _items_table
from lemon.evaluation.report import build_report
from lemon.evaluation.store import ResultsStore
from lemon.inspection.view.build import _run_json
from tests.cli.test_cli_core import lemon
from tests.evaluation.test_report import _fill

CHOSEN_LEVEL = "chosen by the method"  # as lemon.evaluation.methods.CHOSEN_LEVEL


def _store(path: Path) -> None:
    items = [str(i) for i in range(4)]
    with ResultsStore(path) as store:
        _fill(store, "tmpl0001", "template", {(i, 0): True for i in items}, 1, 30)
        _fill(store, "cot00001", "cot", {(i, 0): k < 2 for k, i in enumerate(items)}, 1, 10)


def test_report_and_viewer_show_the_level_as_chosen_by_the_method(tmp_path: Path) -> None:
    _store(tmp_path / "r.sqlite")
    with ResultsStore(tmp_path / "r.sqlite") as store:
        md = build_report(store, compare=[("template", "cot")]).markdown
        runs = {r.method: r for r in store.runs()}
    assert f"| template | test | 4 | 1 | tiny | {CHOSEN_LEVEL} |" in md
    assert "| cot | test | 4 | 1 | tiny | medium |" in md
    assert "### Paired test: template vs cot@medium (test, pool tiny)" in md
    assert _run_json(runs["template"])["level"] == CHOSEN_LEVEL and _run_json(runs["cot"])["level"] == "medium"
    assert f"level {CHOSEN_LEVEL}" in str(_items_table(runs["template"], []).title)


def test_runs_lists_the_level_as_chosen_by_the_method(tmp_path: Path, _isolated_home: Path) -> None:
    _store(tmp_path / "r.sqlite")
    proc = lemon("runs", "--store", str(tmp_path / "r.sqlite"), "--method", "template", home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    assert " ".join(proc.stdout.split()).count("medium") == 0 and "chosen" in proc.stdout


def test_report_names_a_trained_policy_under_lemon_home_by_its_place_there(tmp_path: Path,
                                                                          _isolated_home: Path) -> None:
    """The six-benchmark table's policy rows read `trained:/root/.cache/lemon/…` cut to one column: a policy
    under LEMON_HOME is shown relative to it (its stored method, and so its run id, are unchanged); one
    elsewhere keeps its full path, so two policies never share a row."""
    inside, outside = _isolated_home / "policies" / "sft" / "model", tmp_path / "elsewhere" / "sft" / "model"
    items = [str(i) for i in range(4)]
    with ResultsStore(tmp_path / "r.sqlite") as store:
        _fill(store, "pol00001", f"trained:{inside}", {(i, 0): True for i in items}, 1, 30)
        _fill(store, "pol00002", f"trained:{outside}", {(i, 0): k < 3 for k, i in enumerate(items)}, 1, 30)
        _fill(store, "cot00001", "cot", {(i, 0): k < 2 for k, i in enumerate(items)}, 1, 10)
        _fill(store, "pol00003", f"trained:{inside}", {(i, 0): True for i in items}, 1, 30, benchmark="svamp")
        md = build_report(store, compare=[(f"trained:{inside}", "best")]).markdown
        stored = {r.method for r in store.runs()}
    assert f"trained:{inside}" in stored  # the store keeps the path the run was asked with
    assert "| trained:$LEMON_HOME/policies/sft/model | 100.0 % at 30 tok (test, 4 x 1) |" in md  # all benchmarks
    assert f"| trained:$LEMON_HOME/policies/sft/model | test | 4 | 1 | tiny | {CHOSEN_LEVEL} |" in md
    assert f"| trained:{outside} | test | 4 | 1 | tiny | {CHOSEN_LEVEL} |" in md
    assert "### Paired test: trained:$LEMON_HOME/policies/sft/model vs cot@medium" in md
    assert str(_isolated_home) not in md


def test_the_table_shows_the_latest_of_two_equal_runs_of_a_method(tmp_path: Path) -> None:
    """A method whose identity moved (the template's teams changed) has two complete runs of one cell: the
    cross-benchmark table and its paired row show the one written last, not the first the store lists."""
    items = [str(i) for i in range(4)]
    with ResultsStore(tmp_path / "r.sqlite") as store:
        for bench in ("gsm8k", "svamp"):
            _fill(store, f"old-{bench}", "template", {(i, 0): k < 1 for k, i in enumerate(items)}, 1, 30,
                  benchmark=bench)
            _fill(store, f"cot-{bench}", "cot", {(i, 0): k < 2 for k, i in enumerate(items)}, 1, 10,
                  benchmark=bench)
        for bench in ("gsm8k", "svamp"):  # written after: later `created`
            _fill(store, f"new-{bench}", "template", {(i, 0): True for i in items}, 1, 20, benchmark=bench)
        assert all(store.run(f"new-{b}").created > store.run(f"old-{b}").created for b in ("gsm8k", "svamp"))
        md = build_report(store).markdown
    row = next(line for line in md.splitlines() if line.startswith("| template | "))
    assert row == "| template | 100.0 % at 20 tok (test, 4 x 1) | 100.0 % at 20 tok (test, 4 x 1) |"
