"""Pooled paired tests over the benchmarks of the cross-benchmark table: one row of cells against another (issue 53).

Why: a claim about the average of six benchmarks rests on the six columns together, and each column alone has
60 pairs, too few to separate two close teams. So the headline of docs/results.md pools them: per benchmark the
(item, seed) pairs the two rows' cells share, the pairs only row A got right and those only row B got right,
summed over the benchmarks, then the exact McNemar test on the sums. `lemon report --pooled A,B` rebuilds it
(`six_benchmarks.sh`'s report part asks the headline's). A row is one of:

- a method or a table label (`template`, `esc`, `esc@large`, `trained:PATH`): its cell in each benchmark;
- `best`: each benchmark's best fixed baseline, chosen as the table chooses it (`table.best_of`: on these same
  items, so a test against it answers "is the best reliably better");
- a per-kind rule, `number=esc/choice=esc/code=exsc`: in each benchmark the cell of the fixed baseline its answer
  kind names, the rule a user who knows only the task's kind could follow;
- `kinds`: the most accurate such rule, per answer kind the fixed baseline with a complete cell in each of that
  kind's benchmarks and the highest mean accuracy over them (the cheaper on a tie), chosen on these items too.

A benchmark where either row has no cell, or whose two cells are not comparable (another split or pool, no
shared pair: `table.not_comparable`), is left out and named.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lemon.benchmarks.registry import get_benchmark
from lemon.errors import LemonError
from lemon.evaluation.mcnemar import mcnemar_exact
from lemon.evaluation.methods import run_label, shown_method, uses_level
from lemon.evaluation.table import PairFn, RunStats, best_of, not_comparable
from lemon.orchestrator.kinds import kind_names

BEST = "best"
KINDS = "kinds"
Cells = Mapping[tuple[str, str], RunStats]  # (table label, benchmark) -> the cell's run (`table.runs_by_cell`)


@dataclass(frozen=True)
class PooledPart:
    """One benchmark of a pooled test: the two cells and their discordant pairs, or why it was left out."""

    benchmark: str
    a: RunStats | None
    b: RunStats | None
    pairs: int = 0
    a_only: int = 0
    b_only: int = 0
    left_out: str = ""


@dataclass(frozen=True)
class PooledResult:
    """Row A against row B over the benchmarks both have comparable cells in."""

    a: str
    b: str
    parts: tuple[PooledPart, ...]

    @property
    def counted(self) -> tuple[PooledPart, ...]:
        return tuple(p for p in self.parts if not p.left_out)

    @property
    def pairs(self) -> int:
        return sum(p.pairs for p in self.counted)

    @property
    def a_only(self) -> int:
        return sum(p.a_only for p in self.counted)

    @property
    def b_only(self) -> int:
        return sum(p.b_only for p in self.counted)

    @property
    def p_value(self) -> float:
        return mcnemar_exact(self.a_only, self.b_only)


def _kind(benchmark: str) -> str | None:
    """The benchmark's answer kind, or None for one this LEMON does not know (a store from elsewhere)."""
    try:
        return str(get_benchmark(benchmark).kind)
    except LemonError:
        return None


def _named(cells: Cells, selector: str, benchmark: str) -> RunStats | None:
    """The cell of `benchmark` that `selector` names: a table label, or a method as stored or as shown."""
    found = [s for (label, bench), s in cells.items() if bench == benchmark
             and selector in (label, s.run.method, shown_method(s.run.method))]
    if len(found) > 1:
        labels = ", ".join(sorted(run_label(s.run.method, s.run.level) for s in found))
        raise LemonError(f"--pooled: {selector!r} names {len(found)} cells of {benchmark} ({labels}); "
                         "write one of those labels")
    return found[0] if found else None


def _fixed(cells: Cells, benchmark: str) -> list[RunStats]:
    return [s for (_, bench), s in cells.items() if bench == benchmark and uses_level(s.run.method)]


def parse_rule(text: str) -> dict[str, str]:
    """`number=esc/choice=esc/code=exsc` -> {kind: label}; a one-line error for an unknown kind or a bad part."""
    rule: dict[str, str] = {}
    for part in text.split("/"):
        kind, sep, label = (x.strip() for x in part.partition("="))
        if not sep or not label or kind not in kind_names() or kind in rule:
            raise LemonError(f"--pooled: {text!r} is not a per-kind rule: write KIND=METHOD parts joined by '/', "
                             f"each kind once, kinds among {', '.join(kind_names())}, e.g. "
                             "number=esc/choice=esc/code=exsc")
        rule[kind] = label
    return rule


def best_per_kind(cells: Cells, benchmarks: Sequence[str]) -> dict[str, str]:
    """`kinds`: per answer kind, the fixed baseline label with a complete cell in each of that kind's benchmarks
    (those with any complete fixed cell) and the highest mean accuracy over them, the lower mean cost on a tie."""
    rule = {}
    for kind in dict.fromkeys(k for b in benchmarks if (k := _kind(b)) is not None):
        own = [b for b in benchmarks if _kind(b) == kind and any(s.complete for s in _fixed(cells, b))]
        per_label: dict[str, list[RunStats]] = {}
        for b in own:
            for s in _fixed(cells, b):
                if s.complete:
                    per_label.setdefault(run_label(s.run.method, s.run.level), []).append(s)
        full = {label: runs for label, runs in per_label.items() if len(runs) == len(own)}
        if full:
            rule[kind] = max(full, key=lambda label: (statistics.fmean(s.accuracy_mean for s in full[label]),
                                                      -statistics.fmean(s.cost for s in full[label])))
    return rule


def row_cells(cells: Cells, selector: str, benchmarks: Sequence[str]) -> dict[str, RunStats | None]:
    """Benchmark -> the cell row `selector` has there (None: none); a one-line error when it names nothing."""
    if selector == BEST:
        return {b: best_of(_fixed(cells, b)) for b in benchmarks}
    if selector == KINDS or "=" in selector:
        rule = best_per_kind(cells, benchmarks) if selector == KINDS else parse_rule(selector)
        out = {}
        for b in benchmarks:
            label = rule.get(_kind(b) or "")
            out[b] = _named(cells, label, b) if label is not None else None
        return out
    found = {b: _named(cells, selector, b) for b in benchmarks}
    if not any(found.values()):
        labels = ", ".join(dict.fromkeys(label for label, _ in cells))
        raise LemonError(f"--pooled: no cell of {selector!r}; rows: {labels or 'none'}, or best, kinds, or a "
                         "per-kind rule such as number=esc/choice=esc/code=exsc")
    return found


def _part(benchmark: str, a: RunStats | None, b: RunStats | None, pair: PairFn) -> PooledPart:
    if a is None or b is None:
        return PooledPart(benchmark, a, b, left_out=f"no cell of {'A' if a is None else 'B'}")
    if why := not_comparable(a, b):
        return PooledPart(benchmark, a, b, left_out=f"not comparable ({why})")
    r = pair(a, b)
    if not r.pairs:
        return PooledPart(benchmark, a, b, left_out="not comparable (no shared (item, seed) pairs)")
    return PooledPart(benchmark, a, b, r.pairs, r.a_only, r.b_only)


def pooled_test(cells: Cells, benchmarks: Sequence[str], a: str, b: str, pair: PairFn) -> PooledResult:
    """Row `a` against row `b` (module docstring), benchmark by benchmark in `benchmarks`' order."""
    rows_a, rows_b = row_cells(cells, a, benchmarks), row_cells(cells, b, benchmarks)
    return PooledResult(a, b, tuple(_part(x, rows_a[x], rows_b[x], pair) for x in benchmarks))


def _label(s: RunStats | None) -> str:
    return run_label(s.run.method, s.run.level) if s is not None else "–"


def pooled_lines(result: PooledResult) -> list[str]:
    """The markdown of one pooled test: a line per benchmark, the pooled count and p, what was left out."""
    counted = result.counted
    seeds = max((len(p.a.seeds) for p in counted if p.a is not None), default=0)
    caveat = " With several seeds the pairs of one item are not independent; read p as approximate." \
        if seeds > 1 else ""
    lines = ["", f"### Pooled over the benchmarks: {result.a} against {result.b}", "",
             "Exact McNemar test on the discordant pairs summed over the benchmarks (each benchmark's (item, seed) "
             f"pairs its two cells share): the pairs A alone got right / the pairs B alone got right.{caveat}", "",
             "| benchmark | A | B | pairs | A alone / B alone |", "|---|---|---|---:|---|"]
    for p in result.parts:
        count = p.left_out or f"{p.a_only}/{p.b_only}"
        lines.append(f"| {p.benchmark} | {_label(p.a)} | {_label(p.b)} | {p.pairs if not p.left_out else '–'} "
                     f"| {count} |")
    lines.append(f"| **pooled** ({len(counted)} of {len(result.parts)} benchmarks) | {result.a} | {result.b} "
                 f"| {result.pairs} | **{result.a_only}/{result.b_only}, p = {result.p_value:.2g}** |")
    return lines
