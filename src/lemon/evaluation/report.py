"""Reports from the results store: a markdown table per benchmark, paired significance tests, and a plot.

What a referee asked of the paper, and what this reports by default:
- accuracy as mean ± std over seeds, where std is the sample standard deviation of the per-seed accuracies
  ("n/a" with one seed: one replicate says nothing about variance);
- worker tokens per item next to accuracy (a method that doubles the tokens must say so);
- a PAIRED test between two methods on the same items and seeds: the exact McNemar test, i.e. a two-sided
  binomial test with p = 1/2 on the discordant pairs (one method right, the other wrong). Pairs are
  (item, seed) keys present in both runs. With one seed this is the textbook exact McNemar test; with several
  seeds the pairs of one item are not independent, so the p-value is then an approximation and says so.
Every generated artifact names the store path, the date, and the pool and level of each row, so a number can
always be traced back to the run that produced it.
"""

from __future__ import annotations

import io
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict

import yaml

from lemon.benchmarks.base import DataDir
from lemon.errors import LemonError
from lemon.evaluation.agent_replies import replies_lines
from lemon.evaluation.baselines import method_names
from lemon.evaluation.mcnemar import mcnemar_exact
from lemon.evaluation.methods import run_label, shown_level, shown_method, uses_level
from lemon.evaluation.pooled import PooledResult, pooled_lines, pooled_test
from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.evaluation.table import PairFn, benchmark_table, best_of, columns_of, runs_by_cell
from lemon.evaluation.teams import adaptive_runs, teams_lines
from lemon.files import write_output
from lemon.llm.models import parameters_b


@dataclass(frozen=True)
class RunStats:
    """Aggregates of one run's stored rows."""

    run: RunInfo
    n_items: int                  # distinct items with at least one stored row
    seeds: tuple[int, ...]        # seeds with at least one stored row
    rows: int
    per_seed_accuracy: dict[int, float]
    accuracy_mean: float
    accuracy_std: float | None    # None with fewer than two seeds
    tokens_mean: float            # worker tokens per item, over all rows
    tokens_std: float | None      # std over seeds of the per-seed mean tokens
    orchestrator_tokens_mean: float
    errors: int                   # rows whose status is not ok
    wall_s_mean: float = math.nan  # seconds per (item, seed), spec writing included (what one `lemon run` waits)
    # Worker tokens weighted by each model's size in billions of parameters (the paper's cost measure); nan
    # when a model's size cannot be read from its name.
    param_tokens_mean: float = math.nan
    replies: int = 0              # worker replies (agents that generated at least one token)
    reply_limit: int | None = None  # the run's worker reply limit (`reply_limit(run)`); None: unknown
    # Of the replies, those that stopped at that limit: cut mid-answer, so mostly wrong. A large share means the
    # cell measures the limit, not the method (AQuA at 384: 151 of 300 voters). None when the limit is unknown.
    replies_at_limit: int | None = None
    # Where the run's specs came from (`ResultsStore.spec_sources`: model / repaired / fallback / template); empty
    # for a fixed baseline. A policy whose output was unusable ran the fallback instead, so its cell then
    # measures the fallback, not the policy (the six-benchmark SFT policy on MMLU: 28 of 60).
    spec_sources: Mapping[str, int] = field(default_factory=dict)

    @property
    def cost(self) -> float:
        """What a user pays in tokens per item: the workers' and the orchestrator's (its spec is tokens too)."""
        return self.tokens_mean + self.orchestrator_tokens_mean

    @property
    def expected_rows(self) -> int:
        """(item, seed) pairs the run was started for."""
        return self.run.n_items * max(1, self.run.seeds)

    @property
    def complete(self) -> bool:
        return self.rows >= self.expected_rows


def run_stats(run: RunInfo, rows: Sequence[ItemRow], spec_sources: Mapping[str, int] | None = None) -> RunStats:
    """Per-seed accuracy, its mean and sample std, and tokens per item of one run (`spec_sources`: as
    `ResultsStore.spec_sources` reads them)."""
    by_seed: dict[int, list[ItemRow]] = {}
    for r in rows:
        by_seed.setdefault(r.seed, []).append(r)
    per_seed = {s: sum(r.correct for r in rs) / len(rs) for s, rs in sorted(by_seed.items())}
    per_seed_tokens = [sum(r.total_tokens for r in rs) / len(rs) for _, rs in sorted(by_seed.items())]
    accs = list(per_seed.values())
    return RunStats(
        run=run,
        n_items=len({r.item_id for r in rows}),
        seeds=tuple(per_seed),
        rows=len(rows),
        per_seed_accuracy=per_seed,
        accuracy_mean=statistics.fmean(accs) if accs else math.nan,
        accuracy_std=statistics.stdev(accs) if len(accs) >= 2 else None,
        tokens_mean=statistics.fmean(r.total_tokens for r in rows) if rows else math.nan,
        tokens_std=statistics.stdev(per_seed_tokens) if len(per_seed_tokens) >= 2 else None,
        orchestrator_tokens_mean=statistics.fmean(r.orchestrator_tokens for r in rows) if rows else 0.0,
        errors=sum(r.status != "ok" for r in rows),
        wall_s_mean=statistics.fmean(r.latency_s for r in rows) if rows else math.nan,
        param_tokens_mean=statistics.fmean(_param_tokens(r) for r in rows) if rows else math.nan,
        **_replies_at_limit(run, rows),
        spec_sources=dict(spec_sources or {}),
    )


def reply_limit(run: RunInfo) -> int | None:
    """The tokens a worker reply of `run` could have: its own `max_tokens`, else the limit recorded when it was
    created (`evaluate.workers_reply_limit`), else, for a run stored before that, the default of the built-in
    pool it ran on (as that pool file reads now); None for such a run on a pool file."""
    from lemon.llm.pools import BUILTIN, read_pool_config

    for key in ("max_tokens", "reply_limit"):
        cap = run.config.get(key)
        if isinstance(cap, int):
            return cap
    pool = run.config.get("pool_identity", run.pool)
    return read_pool_config(str(pool)).defaults.max_tokens if pool in BUILTIN else None


class _ReplyCounts(TypedDict):
    replies: int
    reply_limit: int | None
    replies_at_limit: int | None


def _replies_at_limit(run: RunInfo, rows: Sequence[ItemRow]) -> _ReplyCounts:
    """`replies`, `reply_limit` and `replies_at_limit` of RunStats, from each row's per-agent completion tokens."""
    completions = [int(t.get("completion", 0)) for r in rows for t in r.tokens.values()]
    replies = [n for n in completions if n > 0]
    cap = reply_limit(run)
    return {"replies": len(replies), "reply_limit": cap,
            "replies_at_limit": None if cap is None else sum(n >= cap for n in replies)}


def _param_tokens(row: ItemRow) -> float:
    """Σ over the row's agents of tokens x the agent model's parameters (billions); nan if one is unknown."""
    if row.total_tokens and not row.tokens:
        return math.nan  # a row that does not say which agents spent its tokens
    total = 0.0
    for t in row.tokens.values():
        n = int(t.get("prompt", 0)) + int(t.get("completion", 0))
        if n:
            total += n * parameters_b(str(t.get("model") or ""))
    return total


def format_accuracy(stats: RunStats) -> str:
    """`84.32 ± 1.20` in percent, or `84.32 ± n/a` with one seed."""
    if math.isnan(stats.accuracy_mean):
        return "n/a"
    std = "n/a" if stats.accuracy_std is None else f"{100 * stats.accuracy_std:.2f}"
    return f"{100 * stats.accuracy_mean:.2f} ± {std}"


# ---- paired test ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairedResult:
    """Method A vs B on the (item, seed) pairs both runs have."""

    run_a: RunInfo
    run_b: RunInfo
    pairs: int
    both_right: int
    a_only: int                   # A right, B wrong
    b_only: int                   # A wrong, B right
    both_wrong: int
    p_value: float
    seeds: int

    @property
    def discordant(self) -> int:
        return self.a_only + self.b_only


def paired_compare(run_a: RunInfo, rows_a: Sequence[ItemRow], run_b: RunInfo,
                   rows_b: Sequence[ItemRow]) -> PairedResult:
    """Exact McNemar test on the (item, seed) keys present in both runs."""
    a = {(r.item_id, r.seed): r.correct for r in rows_a}
    b = {(r.item_id, r.seed): r.correct for r in rows_b}
    keys = sorted(a.keys() & b.keys())
    table = {(x, y): 0 for x in (True, False) for y in (True, False)}
    for k in keys:
        table[(a[k], b[k])] += 1
    return PairedResult(
        run_a=run_a, run_b=run_b, pairs=len(keys), both_right=table[(True, True)],
        a_only=table[(True, False)], b_only=table[(False, True)], both_wrong=table[(False, False)],
        p_value=mcnemar_exact(table[(True, False)], table[(False, True)]),
        seeds=len({s for _, s in keys}),
    )


def _matches(run: RunInfo, selector: str) -> bool:
    return run.method == selector or (len(selector) >= 4 and run.run_id.startswith(selector))


BEST = "best"


def _best_other(stats: Mapping[str, RunStats], ra: RunInfo) -> RunInfo | None:
    """The best fixed baseline (`table.best_of`: the most accurate, the cheaper on a tie) of another method on
    A's benchmark, split and pool: at A's level when A is a baseline, at any level when A picks its agents'
    levels (the template, a trained policy), whose runs are stored under a nominal level (issue 25:
    `template,best` found no partner)."""
    group = [s for s in stats.values() if s.run.method != ra.method and uses_level(s.run.method)
             and (s.run.benchmark, s.run.split, s.run.pool) == (ra.benchmark, ra.split, ra.pool)
             and (s.run.level == ra.level or not uses_level(ra.method))]
    best = best_of(group)
    return best.run if best else None


def find_comparisons(stats: Mapping[str, RunStats], rows: Mapping[str, Sequence[ItemRow]], a: str,
                     b: str) -> list[PairedResult]:
    """Every pairing of a run of A with a run of B on the same benchmark, split, pool and level; two runs named
    by their ids need only share benchmark and split (the pairs are (item, seed), e.g. the default orchestration
    against one CoT agent at another level).

    `b == "best"` pairs each run of A with the most accurate fixed baseline of its group (`_best_other`; chosen
    on these same items, so the test answers "is the best baseline reliably better", not an unbiased one).
    `stats` and `rows` are the report's, by run id (each run's rows are read once).
    """
    runs = [s.run for s in stats.values()]
    out = []
    for ra in runs:
        if not _matches(ra, a):
            continue
        if b == BEST:
            rb = _best_other(stats, ra)
            if rb is not None:
                out.append(paired_compare(ra, rows[ra.run_id], rb, rows[rb.run_id]))  # as asked: A, B
            continue
        for rb in runs:
            if rb.run_id == ra.run_id or not _matches(rb, b):
                continue
            by_id = ra.method != a and rb.method != b
            shared = ("benchmark", "split") if by_id else ("benchmark", "split", "pool", "level")
            if any(getattr(ra, f) != getattr(rb, f) for f in shared):
                continue
            out.append(paired_compare(ra, rows[ra.run_id], rb, rows[rb.run_id]))
    return out


# ---- rendering ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    markdown: str
    stats: tuple[RunStats, ...]
    comparisons: tuple[PairedResult, ...]
    generated_at: str
    store_path: Path
    plot_path: Path | None = None
    pooled: tuple[PooledResult, ...] = ()


# ---- the accuracy-tokens front ---------------------------------------------------------------------------


def _same_pairs(s: RunStats) -> tuple[str, str, str, int, tuple[int, ...]]:
    """What two runs must share to be compared: benchmark, split, pool, items and seeds."""
    return s.run.benchmark, s.run.split, s.run.pool, s.n_items, s.seeds


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """The standard Pareto rule on (accuracy, cost): `a` is at least as accurate and at most as costly as `b`,
    and strictly better in one of the two."""
    return a[0] >= b[0] and a[1] <= b[1] and (a[0] > b[0] or a[1] < b[1])


def dominated_by(stats: Sequence[RunStats]) -> dict[str, tuple[RunStats, ...]]:
    """For every COMPLETE run, the complete runs that dominate it on (accuracy, cost) by the standard Pareto
    rule, cost counting the orchestrator's tokens with the workers' (`RunStats.cost`).

    Runs are compared only on the same benchmark, split, pool, items and seeds (a run on other items is not
    evidence). A run with no dominating run is on the accuracy-cost front; partial runs are left out.
    """
    done = [s for s in stats if s.complete and not math.isnan(s.accuracy_mean)]
    return {s.run.run_id: tuple(q for q in done if _same_pairs(q) == _same_pairs(s)
                                and dominates((q.accuracy_mean, q.cost), (s.accuracy_mean, s.cost)))
            for s in done}


def _render_front(stats: Sequence[RunStats]) -> list[str]:
    """Per group of runs on the same items and seeds (two runs at least): who is on the front, who is not."""
    beaten = dominated_by(stats)
    groups: dict[tuple[str, str, str, int, tuple[int, ...]], list[RunStats]] = {}
    for s in (s for s in stats if s.run.run_id in beaten):
        groups.setdefault(_same_pairs(s), []).append(s)
    lines: list[str] = []
    for (_, split, pool, n, seeds), group in groups.items():
        if len(group) < 2:
            continue
        lines += ["", f"### Accuracy-tokens front ({split}, pool {pool}, {n} items x {len(seeds)} seeds)", "",
                  "A run is off the front when another run on the same items and seeds is at least as accurate "
                  "and at most as costly, and strictly better in one (the standard Pareto rule; cost = worker + "
                  "orchestrator tokens per item; point estimates: the paired tests say which gaps are noise). "
                  "B-param x tokens weights each worker token by its model's size in billions of parameters.",
                  "", "| method | level | accuracy (%) | worker tokens / item | orchestrator tokens / item "
                  "| cost / item | B-param x tokens / item | front |", "|---|---|---|---:|---:|---:|---:|---|"]
        for s in sorted(group, key=lambda g: g.cost):
            by = ", ".join(run_label(q.run.method, q.run.level) for q in beaten[s.run.run_id])
            method, level = shown_method(s.run.method), shown_level(s.run.method, s.run.level)
            lines.append(f"| {method} | {level} | {format_accuracy(s)} | {_fmt_tokens(s.tokens_mean)} "
                         f"| {_fmt_tokens(s.orchestrator_tokens_mean)} | {_fmt_tokens(s.cost)} "
                         f"| {_fmt_tokens(s.param_tokens_mean)} "
                         f"| {'no: dominated by ' + by if by else '**on the front**'} |")
    return lines


def _fmt_cut(s: RunStats) -> str:
    """`12 of 300 at 384`: the worker replies that stopped at the run's reply limit (`?` when it is unknown)."""
    if s.replies_at_limit is None or s.reply_limit is None:
        return f"? of {s.replies:,}"
    return f"{s.replies_at_limit:,} of {s.replies:,} at {s.reply_limit:,}"


def _fmt_tokens(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.1f}"


def render_markdown(stats: Sequence[RunStats], comparisons: Sequence[PairedResult], *, store_path: Path,
                    generated_at: str, sections: Mapping[str, Sequence[str]] | None = None,
                    pair: PairFn[RunStats] | None = None, pooled: Sequence[PooledResult] = ()) -> str:
    """The results document: provenance line, the cross-benchmark table (with `pair`, its paired tests against
    each benchmark's best baseline) and the `pooled` tests over its benchmarks (`pooled.py`), one table per
    benchmark, the paired tests, then each benchmark's further
    `sections` (benchmark -> markdown lines: the teams each orchestrating method wrote, `lemon.evaluation.teams`,
    and where the answer was lost, `lemon.evaluation.agent_replies`)."""
    lines = [
        "# LEMON evaluation results",
        "",
        f"Generated by `lemon report` on {generated_at} from the results store `{store_path}`.",
        "",
        "Accuracy (%) is the mean over seeds of the per-seed accuracy; ± is the sample standard deviation",
        "of the per-seed accuracies (n/a with one seed). Items are the first *n* items of the split in its",
        "fixed order. Worker tokens are prompt + completion tokens of all agents per item (mean over items",
        "and seeds); orchestrator tokens (spec writing) are listed apart. `replies cut` counts the worker",
        "replies that stopped at the reply limit (`--max-tokens`): many of them mean the cell measures the",
        "limit, not the method. `errors` counts items whose run did not end `ok` (they count as wrong).",
    ]
    benchmarks = sorted({s.run.benchmark for s in stats})
    paper = paper_results()
    if not benchmarks:
        lines += ["", "_The store holds no runs yet: run `lemon eval` first._"]
    overview = benchmark_table(stats, paper, pair)
    lines += ["", *overview] if overview else []
    for result in pooled:
        lines += pooled_lines(result)
    for bench in benchmarks:
        lines += ["", f"## {bench}", "",
                  "| method | split | n items | seeds | pool | level | temp. | accuracy (%) "
                  "| worker tokens / item | orch. tokens / item | wall s / item | replies cut | errors | run |",
                  "|---|---|---:|---:|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
        for s in (s for s in stats if s.run.benchmark == bench):
            partial = "" if s.complete else f" (partial: {s.rows}/{s.expected_rows} rows)"
            temp = s.run.config.get("temperature", "")
            method, level = shown_method(s.run.method), shown_level(s.run.method, s.run.level)
            lines.append(
                f"| {method} | {s.run.split} | {s.n_items}{partial} | {len(s.seeds)} | {s.run.pool} | "
                f"{level} | {temp} | {format_accuracy(s)} | {_fmt_tokens(s.tokens_mean)} | "
                f"{_fmt_tokens(s.orchestrator_tokens_mean)} | {_fmt_tokens(s.wall_s_mean)} | {_fmt_cut(s)} | "
                f"{s.errors} | `{s.run.run_id}` |"
            )
        lines += paper_lines(bench, paper)
        lines += _render_front([s for s in stats if s.run.benchmark == bench])
        for c in (c for c in comparisons if c.run_a.benchmark == bench):
            lines += ["", *_render_comparison(c)]
        if sections and sections.get(bench):
            lines += ["", *sections[bench]]
    return "\n".join(lines) + "\n"


def paper_results() -> dict[str, Any]:
    """The paper's reported LEMON accuracy per benchmark (`paper.yaml`): its workers and one entry a benchmark."""
    return yaml.safe_load((resources.files("lemon.evaluation") / "paper.yaml").read_text("utf-8"))


def paper_lines(benchmark: str, paper: Mapping[str, Any]) -> list[str]:
    """A line with the paper's LEMON accuracy on `benchmark`, for orientation only ([] where it reports none)."""
    entry = paper["lemon"].get(benchmark)
    if entry is None:
        return []
    return ["", f"For orientation only, not comparable (other workers, the full split): the paper reports LEMON "
                f"at {entry['accuracy']:.2f} % on {benchmark} {entry['split']} ({entry['items']:,} items) with "
                f"{paper['workers']} workers."]


def _render_comparison(c: PairedResult) -> list[str]:
    ra, rb = c.run_a, c.run_b
    a, b = ra.method, rb.method
    if (ra.pool, ra.level) == (rb.pool, rb.level) and uses_level(a) and uses_level(b):
        where = f"{ra.split}, pool {ra.pool}, level {ra.level}"
    else:  # two runs named by id, or a method that picks its own levels: each run says its level, if any
        a, b = run_label(a, ra.level), run_label(b, rb.level)
        where = f"{ra.split}, pool {ra.pool}" if ra.pool == rb.pool else f"{ra.split}, two pools"
    caveat = ("" if c.seeds <= 1 else
              f" With {c.seeds} seeds the pairs of one item are not independent; read p as approximate.")
    return [
        f"### Paired test: {a} vs {b} ({where})",
        "",
        f"Exact McNemar test (two-sided binomial test, p = 1/2, on the discordant pairs) over {c.pairs} "
        f"(item, seed) pairs present in both runs (`{c.run_a.run_id}` vs `{c.run_b.run_id}`): "
        f"{c.discordant} discordant pairs ({a} right / {b} wrong: {c.a_only}; {a} wrong / {b} right: "
        f"{c.b_only}); both right {c.both_right}, both wrong {c.both_wrong}; "
        f"**p = {c.p_value:.4g}**.{caveat}",
    ]


def plot_accuracy_vs_tokens(stats: Sequence[RunStats], path: Path, *, store_path: Path,
                            generated_at: str) -> Path:
    """One subplot per benchmark, one point per run: worker tokens/item vs accuracy, error bars = std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benchmarks = sorted({s.run.benchmark for s in stats}) or ["(no runs)"]
    cols = min(3, len(benchmarks))
    nrows = math.ceil(len(benchmarks) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 4.2 * nrows), squeeze=False)
    for ax, bench in zip(axes.flat, benchmarks, strict=False):
        for s in (s for s in stats if s.run.benchmark == bench):
            if math.isnan(s.accuracy_mean):
                continue
            yerr = 100 * s.accuracy_std if s.accuracy_std is not None else None
            xerr = s.tokens_std if s.tokens_std is not None else None
            ax.errorbar(s.tokens_mean, 100 * s.accuracy_mean, yerr=yerr, xerr=xerr, fmt="o", capsize=3,
                        label=f"{shown_method(s.run.method)} ({s.run.pool}/{shown_level(s.run.method, s.run.level)}, "
                              f"{len(s.seeds)} seeds)")
            ax.annotate(shown_method(s.run.method), (s.tokens_mean, 100 * s.accuracy_mean), textcoords="offset points",
                        xytext=(4, 4), fontsize=8)
        ax.set_title(f"{bench}")
        ax.set_xlabel("worker tokens per item")
        ax.set_ylabel("accuracy (%)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(benchmarks):]:
        ax.set_visible(False)
    fig.suptitle("Accuracy vs worker tokens (error bars: std over seeds)\n"
                 f"store {store_path}, {generated_at}", fontsize=9)
    fig.tight_layout()
    png = io.BytesIO()  # drawn in memory, then written as every file is: a full disk left a 0-byte PNG
    fig.savefig(png, format="png", dpi=120)
    plt.close(fig)
    return write_output(path, png.getvalue(), what="the plot", fix="pass --plot another path")


BEGIN_MARK = "<!-- lemon report: begin -->"
END_MARK = "<!-- lemon report: end -->"


#: Issue 55's bar: an orchestrator's specs run as written or after mechanical repair on this share of the items.
USABLE_SHARE = 0.99


def spec_sources_lines(runs: Sequence[RunInfo], sources: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Per orchestrated cell (a run whose specs an orchestrator wrote), the share of its specs that ran as
    written, after mechanical repair, and via the fallback (`ResultsStore.spec_sources`), and whether the
    usable ones reach `USABLE_SHARE`; [] when no run of the benchmark was orchestrated."""
    rows = []
    for run in runs:
        found = sources.get(run.run_id) or {}
        total = sum(found.values())
        if not total:
            continue
        written = found.get("model", 0) + found.get("template", 0)
        repaired, fallback = found.get("repaired", 0), found.get("fallback", 0)
        usable = "yes" if written + repaired >= USABLE_SHARE * total else "**no**"
        rows.append(f"| {shown_method(run.method)} | {total} | {100 * written / total:.1f} | "
                    f"{100 * repaired / total:.1f} | {100 * fallback / total:.1f} | {usable} | `{run.run_id}` |")
    if not rows:
        return []
    return ["", f"Where each orchestrated cell's specs came from (% of its items x seeds): as written, after "
                f"mechanical repair, or unusable so the fallback ran; usable = as written or repaired on at least "
                f"{100 * USABLE_SHARE:.0f} %.", "",
            "| method | specs | as written (%) | repaired (%) | fallback (%) | usable | run |",
            "|---|---:|---:|---:|---:|---|---|", *rows]


def _sections(store: ResultsStore, runs: Sequence[RunInfo], sources: Mapping[str, Mapping[str, int]], *,
              replies: bool, data_dir: DataDir) -> dict[str, list[str]]:
    """Per benchmark, the sections after its tables: the teams each orchestrating run wrote, then (with
    `replies`) where each multi-agent run lost its answer."""
    sections: dict[str, list[str]] = defaultdict(list)
    for bench in sorted({r.benchmark for r in runs}):
        sections[bench] += spec_sources_lines([r for r in runs if r.benchmark == bench], sources)
    for run in adaptive_runs(store, runs):
        sections[run.benchmark] += teams_lines(store, run, sources[run.run_id])
    if replies:
        for bench, lines in replies_lines(store, runs, data_dir).items():
            sections[bench] += lines
    return sections


def write_report(out: Path, markdown: str) -> None:
    """Write the report to `out`; if `out` already holds the begin/end marks, replace only what lies between
    them (headings demoted one level), so a hand-written results document can embed a generated table."""
    text = out.read_text(encoding="utf-8") if out.is_file() else ""
    if BEGIN_MARK in text and END_MARK in text.split(BEGIN_MARK, 1)[1]:
        head, rest = text.split(BEGIN_MARK, 1)
        tail = rest.split(END_MARK, 1)[1]
        body = "\n".join("#" + line if line.startswith("#") else line for line in markdown.splitlines())
        markdown = f"{head}{BEGIN_MARK}\n{body}\n{END_MARK}{tail}"
    write_output(out, markdown, what="the report")


def build_report(store: ResultsStore, *, out: Path | None = None, plot: Path | None = None,
                 compare: Sequence[tuple[str, str]] = (), now: datetime | None = None, replies: bool = False,
                 data_dir: DataDir = None, pooled: Sequence[tuple[str, str]] = ()) -> Report:
    """Read every run in the store, render the markdown (and write it to `out`), and draw `plot`.

    `compare` lists the (method or run id, method or run id or "best") pairs to test, in the order shown;
    `pooled` the (row, row) pairs to test pooled over the benchmarks (`pooled.py` says what a row is).
    `replies`: add where each multi-agent run lost its answer (`agent_replies`; reads the benchmark's items
    from `data_dir`, or LEMON_DATA_DIR).
    """
    generated_at = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    order = {m: i for i, m in enumerate((*method_names(), "prompted"))}
    runs = sorted(store.runs(), key=lambda r: (r.benchmark, order.get(r.method, len(order)), r.method, r.pool,
                                               r.level, r.created))
    rows = {r.run_id: store.items(r.run_id) for r in runs}
    sources = {r.run_id: store.spec_sources(r.run_id) for r in runs if not uses_level(r.method)}  # read once
    stats = tuple(run_stats(r, rows[r.run_id], sources.get(r.run_id)) for r in runs)

    def pair(a: RunStats, b: RunStats) -> PairedResult:
        return paired_compare(a.run, rows[a.run.run_id], b.run, rows[b.run.run_id])

    comparisons: list[PairedResult] = []
    methods = sorted({r.method for r in runs})
    for a, b in compare:
        for sel in (a, b):
            if sel != BEST and not any(_matches(r, sel) for r in runs):
                raise LemonError(f"--compare: no run of method or run id {sel!r} in {store.path}; "
                                 f"methods stored: {', '.join(methods) or 'none'}")
        found = find_comparisons({s.run.run_id: s for s in stats}, rows, a, b)
        if not found:
            raise LemonError(f"--compare {a},{b}: no two runs share benchmark, split, pool "
                             "and level; run both methods with the same --split/--pool/--level first")
        comparisons.extend(found)
    cells = runs_by_cell(stats)
    pooled_results = tuple(pooled_test(cells, columns_of(stats), a, b, pair) for a, b in pooled)
    sections = _sections(store, runs, sources, replies=replies, data_dir=data_dir)
    markdown = render_markdown(stats, comparisons, store_path=store.path, generated_at=generated_at,
                               sections=sections, pair=pair, pooled=pooled_results)
    if out is not None:
        write_report(out, markdown)
    plot_path = plot_accuracy_vs_tokens(stats, plot, store_path=store.path, generated_at=generated_at) \
        if plot is not None else None
    return Report(markdown=markdown, stats=stats, comparisons=tuple(comparisons), generated_at=generated_at,
                  store_path=store.path, plot_path=plot_path, pooled=pooled_results)
