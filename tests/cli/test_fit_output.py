"""Output that fits (issue 52, point 13): `lemon run`, `report` and `explain` at 80 and 100 columns print nothing
cropped and split no word; `run` prints the answer first, and its printed spec, piped, reads back as YAML."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from lemon.cli.fit import FitTable
from tests.cli.test_run_output import POOL
from tests.pools import LEVELS
from tests.view.conftest import build_store

# A code task with examples: the template's team is five programmers behind the examples gate, and its voter's
# `depends_on` line is 84 characters, wider than an 80-column pipe.
CODE_TASK = ('Complete the function.\n```python\ndef add(a, b):\n    """Return a + b.\n    >>> add(1, 2)\n    3\n'
             '    """\n```')
WIDTHS = [80, 100]


def lemon_at(columns: int, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEMON_HOME": str(home), "COLUMNS": str(columns)}
    proc = subprocess.run([sys.executable, "-m", "lemon.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return proc


def _words(text: str) -> set[str]:
    """The words a person reads: whitespace and table rules apart (a record's "column:" is its column)."""
    words = set(re.split(r"[\s│┃┆╎|━─┏┓┗┛┡┩┠┨╇┳┻┯┷┼╋]+", text)) - {""}
    return words | {w.removesuffix(":") for w in words}


def assert_fits(text: str, width: int, words: set[str]) -> None:
    """No line wider than `width` (nothing cropped or spilling) and every word of `words` whole somewhere."""
    wide = [ln for ln in text.splitlines() if len(ln) > width]
    assert not wide, f"{len(wide)} line(s) wider than {width}: {wide[:2]}"
    missing = sorted(w for w in words if w not in _words(text))
    assert not missing, f"words split or cut at {width} columns: {missing[:10]}"


@pytest.mark.parametrize("width", WIDTHS)
def test_run_prints_the_answer_first_and_a_spec_that_reads_back(width: int, tmp_path: Path,
                                                                _isolated_home: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    data = json.loads(lemon_at(width, "run", CODE_TASK, "--pool", str(pool), "--json", home=_isolated_home).stdout)
    out = lemon_at(width, "run", CODE_TASK, "--pool", str(pool), home=_isolated_home).stdout
    lines = out.splitlines()
    assert "answer" in lines[0] and "──" in lines[0], out[:400]  # the answer comes first
    start = next(i for i, ln in enumerate(lines) if ln.lstrip("─ ").startswith("spec ("))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    spec_text = "\n".join(lines[start + 1:end])
    assert yaml.safe_load(spec_text) == yaml.safe_load(data["spec"])  # piped: the spec itself, not cut at the width
    assert any(len(ln) > 80 for ln in lines[start + 1:end])  # (the check above had a long line to keep)
    rest = "\n".join(lines[:start] + lines[end:])
    assert_fits(rest, width, {*data["tokens_by_agent"], "completion", "programmer", "majority_vote"})


@pytest.mark.parametrize("width", WIDTHS)
def test_explain_splits_no_word(width: int, tmp_path: Path, _isolated_home: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text("name: s\ndefaults: {temperature: 0.0, max_tokens: 32}\nlevels:\n" + "".join(
        f"  - {{name: {n}, backend: scripted, model: scripted-{n}}}\n" for n in LEVELS))
    spec = tmp_path / "spec.yaml"
    spec.write_text("agents:\n  - {name: solver, role: math_solver, duty: \"Solve it with great care.\", "
                    "capacity: small}\n  - {name: final, role: critic, capacity: large, depends_on: [solver]}\n")
    args = ("explain", str(spec), "What is 2 + 2?", "--pool", str(pool))
    att = json.loads(lemon_at(width, *args, "--json", home=_isolated_home).stdout)
    out = lemon_at(width, *args, home=_isolated_home).stdout
    words = {"prediction", "cache", "hits", "tokens", "status", "attribution"}
    for e in att["edits"]:
        words |= set(f"{e['field']} {e['edit']} {e['status']} {e['note'] or ''}".split())
    assert_fits(out, width, words)


@pytest.mark.parametrize("width", WIDTHS)
def test_report_renders_for_the_terminal_and_writes_markdown_to_file(width: int, tmp_path: Path, data_dir: Path,
                                                                     _isolated_home: Path) -> None:
    stored = build_store(tmp_path / "r.sqlite", data_dir)
    md = tmp_path / "results.md"
    out = lemon_at(width, "report", "--store", str(stored.store), "--compare", "chain,cot", "--file", str(md),
                   home=_isolated_home).stdout
    markdown = md.read_text()
    assert "|---" in markdown and "|---" not in out and "`" not in out  # Markdown in the file only
    cells = {w for line in markdown.splitlines() if line.startswith("| ") and "---" not in line
             for cell in line.strip("|").split("|") for w in cell.strip().strip("`*_").split()}
    assert {stored.good, stored.bad} <= cells
    assert_fits(out, width, cells | {"McNemar", stored.good, stored.bad})


def test_a_table_too_wide_for_its_words_becomes_one_block_per_row() -> None:
    """Boxed where it fits so, spaced apart where only that fits, else one "column: value" block per row."""
    table = FitTable(("run", "accuracy", "worker tokens / item"), [["0123456789abcdef", "75.00 ± 25.00", "1,234.5"]],
                     title="runs")
    for width, form in ((80, "boxed"), (36, "spaced"), (24, "records")):
        console = Console(width=width, record=True)
        console.print(table)
        text = console.export_text()
        assert ("┃" in text, "run: 0123456789abcdef" in text) == (form == "boxed", form == "records"), text
        assert_fits(text, width, {"0123456789abcdef", "75.00", "25.00", "1,234.5", "worker", "tokens"})
