"""The cross-benchmark table of `lemon report` (issue 25): one row per method, one column per benchmark.

Every cell names its own split, items and seeds, because the table is filled over several working periods
(`experiments/six_benchmarks.sh`) and a cell must not borrow a neighbour's: a partial run says so. The paper's
numbers sit in the last row for orientation only (other workers, the full splits). A second table pairs every
cell with the best fixed baseline of its column (exact McNemar on the shared (item, seed) pairs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from lemon.evaluation.methods import run_label, uses_level
from lemon.evaluation.store import RunInfo


class RunStats(Protocol):
    """What a cell reads of `report.RunStats` (a Protocol: the report imports this module, not the reverse)."""

    @property
    def run(self) -> RunInfo: ...

    @property
    def n_items(self) -> int: ...

    @property
    def seeds(self) -> tuple[int, ...]: ...

    @property
    def rows(self) -> int: ...

    @property
    def accuracy_mean(self) -> float: ...

    @property
    def accuracy_std(self) -> float | None: ...

    @property
    def replies(self) -> int: ...

    @property
    def replies_at_limit(self) -> int | None: ...

    @property
    def spec_sources(self) -> Mapping[str, int]: ...

    @property
    def cost(self) -> float: ...

    @property
    def expected_rows(self) -> int: ...

    @property
    def complete(self) -> bool: ...


class Paired(Protocol):
    """What a cell reads of `report.PairedResult`: method A (the cell) against B (the column's best)."""

    @property
    def pairs(self) -> int: ...

    @property
    def a_only(self) -> int: ...

    @property
    def b_only(self) -> int: ...

    @property
    def p_value(self) -> float: ...


#: The report's own stats type (`report.RunStats`): what `best_of` and the table hand back and pair.
S = TypeVar("S", bound=RunStats)

#: Pairs the runs of two cells (A, B) on their shared (item, seed) keys.
PairFn = Callable[[S, S], Paired]


def best_of(stats: Sequence[S]) -> S | None:
    """The best of some runs of one benchmark: the most accurate, the cheaper on a tie, a complete run before a
    partial one (a partial run's accuracy rests on fewer pairs)."""
    scored = [s for s in stats if s.rows and not math.isnan(s.accuracy_mean)]
    complete = [s for s in scored if s.complete]
    return max(complete or scored, key=lambda s: (s.accuracy_mean, -s.cost), default=None)


#: The paper's column order; a benchmark it does not list follows in name order.
BENCHMARK_ORDER = ("mmlu", "gsm8k", "aqua", "multiarith", "svamp", "humaneval")


def columns_of(stats: Sequence[RunStats]) -> list[str]:
    present = {s.run.benchmark for s in stats}
    return [b for b in BENCHMARK_ORDER if b in present] + sorted(present - set(BENCHMARK_ORDER))


#: A cell says what share of its worker replies were cut at the reply limit from this share up: a cut reply is
#: mostly wrong (GSM8K at 384: 2 of 10 cut CoT replies right, 25 of 50 whole ones), so the cell partly
#: measures the limit.
CUT_SHARE_SHOWN = 0.10


def _cut(s: RunStats) -> str:
    """`, 16 % of replies cut` where a tenth or more of the run's worker replies stopped at its limit."""
    if not s.replies or s.replies_at_limit is None or s.replies_at_limit < CUT_SHARE_SHOWN * s.replies:
        return ""
    return f", {100 * s.replies_at_limit / s.replies:.0f} % of replies cut"


#: A cell says what share of its specs the orchestrator did not write as they ran from this share up: repaired
#: ones, and unusable output replaced by the fallback (the cell then partly measures the fallback).
SPEC_SHARE_SHOWN = 0.10


def specs_note(sources: Mapping[str, int]) -> str:
    """`47 % of specs unusable (the fallback ran), 30 % repaired` where a tenth or more of a run's specs (counted
    by source, `ResultsStore.spec_sources`) were not its orchestrator's as written; else empty."""
    total = sum(sources.values())
    fallback, repaired = sources.get("fallback", 0), sources.get("repaired", 0)
    if not total or fallback + repaired < SPEC_SHARE_SHOWN * total:
        return ""
    parts = [f"{100 * fallback / total:.0f} % of specs unusable (the fallback ran)"] if fallback else []
    parts += [f"{100 * repaired / total:.0f} % {'' if fallback else 'of specs '}repaired"] if repaired else []
    return ", ".join(parts)


def _specs(s: RunStats) -> str:
    note = specs_note(s.spec_sources)
    return f", {note}" if note else ""


def _cell(s: RunStats) -> str:
    """`65.7 ± 8.1 % at 310 tok (test, 30 x 2)`; one seed has no ±; a partial run counts its rows; a run whose
    workers had another reply limit than the pool's default says it (`replies <= 1,024 tok`), and so does one
    whose replies were often cut at its limit (`16 % of replies cut`), and one whose orchestrator's specs were
    often repaired or unusable (`_specs`)."""
    if s.rows == 0:
        return "–"
    std = "" if s.accuracy_std is None else f" ± {100 * s.accuracy_std:.1f}"
    partial = "" if s.complete else f", partial {s.rows}/{s.expected_rows} rows"
    cap = s.run.config.get("max_tokens")
    limit = f", replies <= {cap:,} tok" if isinstance(cap, int) else ""
    return (f"{100 * s.accuracy_mean:.1f}{std} % at {s.cost:,.0f} tok "
            f"({s.run.split}, {s.n_items} x {len(s.seeds)}{partial}{limit}{_cut(s)}{_specs(s)})")


def runs_by_cell(stats: Sequence[S]) -> dict[tuple[str, str], S]:
    """(label, benchmark) -> the run with the most rows, where several runs share a label (other pools, sizes),
    the latest of those: a method whose identity moved (the template's teams) is shown as it runs now."""
    cells: dict[tuple[str, str], S] = {}
    for s in stats:
        key = (run_label(s.run.method, s.run.level), s.run.benchmark)
        if key not in cells or (s.rows, s.run.created) >= (cells[key].rows, cells[key].run.created):
            cells[key] = s
    return cells


def benchmark_table(stats: Sequence[S], paper: Mapping[str, Any], pair: PairFn[S] | None = None) -> list[str]:
    """The markdown lines of the table ([] with fewer than two benchmarks: each benchmark's own table says it
    all), then, given `pair`, the paired tests against each column's best fixed baseline. Accuracy is the mean
    over seeds ± their sample std; tokens are worker + orchestrator tokens per item."""
    columns = columns_of(stats)
    if len(columns) < 2:
        return []
    cells = runs_by_cell(stats)
    labels = list(dict.fromkeys(label for label, _ in cells))
    pools = ", ".join(sorted({s.run.pool for s in cells.values()}))
    lines = ["## All benchmarks", "",
             "Accuracy (mean ± std over seeds) at worker + orchestrator tokens per item, pool "
             f"{pools}; each cell names its split and its items x seeds.", "",
             "| method | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for label in labels:
        row = [_cell(cells[(label, b)]) if (label, b) in cells else "–" for b in columns]
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    reported = [paper["lemon"].get(b) for b in columns]
    row = [f"{e['accuracy']:.1f} % ({e['split']}, {e['items']:,})" if e else "–" for e in reported]
    lines.append(f"| paper: LEMON, {paper['workers']} workers (orientation only) | " + " | ".join(row) + " |")
    return lines + (_paired_table(cells, labels, columns, pair) if pair else [])


def not_comparable(a: S, b: S) -> str | None:
    """Why runs `a` and `b` of one benchmark have no pairs to test (another split or pool: the same item ids
    drawn by other workers or from other items), or None: a paired test counts the same (item, seed) of the
    two runs it names, never a pair borrowed from a third (issue 55)."""
    for what in ("split", "pool"):
        if getattr(a.run, what) != getattr(b.run, what):
            return f"{what} {getattr(a.run, what)}, not {getattr(b.run, what)}"
    return None


def _paired_cell(s: S, best: S, pair: PairFn[S]) -> str:
    """`a/b, p = …` over the (item, seed) pairs `s` shares with `best`, or why there are none to count."""
    if s is best:
        return "**best**"
    if why := not_comparable(s, best):
        return f"not comparable ({why})"
    r = pair(s, best)
    if not r.pairs:
        return "not comparable (no shared (item, seed) pairs)"
    shared = "" if r.pairs == best.rows else f" ({r.pairs} pairs)"
    return f"{r.a_only}/{r.b_only}, p = {r.p_value:.2g}{shared}"


def _paired_table(cells: Mapping[tuple[str, str], S], labels: Sequence[str], columns: Sequence[str],
                  pair: PairFn[S]) -> list[str]:
    best = {b: best_of([s for (label, bench), s in cells.items() if bench == b and uses_level(s.run.method)])
            for b in columns}
    names = [run_label(found.run.method, found.run.level) if (found := best[b]) else "–" for b in columns]
    lines = ["", "### Paired with the best fixed baseline of each benchmark", "",
             "Exact McNemar test on the (item, seed) pairs a cell shares with its column's best fixed baseline "
             "(the most accurate, the cheaper on a tie; chosen on these same items, so p answers \"is the best "
             "reliably better\"): the pairs this method alone got right / the pairs the best alone got right, "
             "p (two-sided); a cell on another split or pool than the best, or sharing no pair with it, is not "
             "comparable.", "",
             "| method | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns),
             "| best fixed baseline | " + " | ".join(names) + " |"]
    for label in labels:
        row = [_paired_cell(cells[(label, b)], found, pair) if (label, b) in cells and (found := best[b])
               and cells[(label, b)].rows else "–" for b in columns]
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    return lines
