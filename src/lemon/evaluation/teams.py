"""Which teams a run wrote, item by item: the evidence that an orchestrator adapts to the task (issue 24).

A trained policy that writes one team for every item is a fixed team with extra steps; its accuracy alone
cannot tell the two apart. So the report counts the distinct teams in a run's traces (the agents folded into
`n x role@level` groups, the aggregator with its stop rule; a duty's wording is left out, since a policy words
it per item, but not whether there is one, `+duty`: a duty is part of the worker's prompt, so two teams that
differ only there draw different samples), with each team's items, accuracy and agents run; and it shows how
many agents the run spent against the item's difficulty, read off the same store's 5-vote run on the same
(item, seed): how many of its five voters were wrong on their own. A team that adapts spends more where more
voters fail.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence

from lemon.benchmarks.base import Item
from lemon.benchmarks.registry import get_benchmark
from lemon.evaluation.bank import is_bank_run
from lemon.evaluation.methods import shown_method, uses_level
from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.orchestrator.kinds import answer_kind
from lemon.spec.model import Spec
from lemon.spec.render import render_stop

Key = tuple[str, int]


def team_signature(topology: Mapping[str, object]) -> str:
    """`5 x math_solver@large+duty -> majority_vote@large {agree: 2}`: consecutive agents of the same role and
    level (and duty or none) reading the same parents (copies) folded into one group, dependent groups after an
    arrow."""
    spec = Spec.model_validate({"agents": topology["agents"], "output": topology.get("output")})
    groups: list[tuple[str, int, bool]] = []
    for i, a in enumerate(spec.agents):
        label = f"{a.role}@{a.capacity}" + ("+duty" if a.duty else "") + \
            (f" {render_stop(a.stop)}" if a.stop is not None else "")
        if groups and groups[-1][0] == label and spec.agents[i - 1].depends_on == a.depends_on:
            groups[-1] = (label, groups[-1][1] + 1, groups[-1][2])
        else:
            groups.append((label, 1, bool(a.depends_on)))
    out = ""
    for i, (label, n, dependent) in enumerate(groups):
        part = f"{n} x {label}" if n > 1 else label
        out += part if i == 0 else (" -> " if dependent else " + ") + part
    return out


def agents_run(row: ItemRow) -> int:
    """Model-calling agents that ran on this item (a vote is no call; agents a stop rule skipped never ran)."""
    return sum(1 for t in row.tokens.values() if t.get("model") != "vote")


def voters_wrong(store: ResultsStore, run: RunInfo) -> dict[Key, int]:
    """Per (item, seed): how many of the 5 voters of the store's 5-vote sc-cot run (same benchmark, split and
    pool) were wrong on their own; empty when the store holds no such run."""
    candidates = [r for r in store.runs() if is_bank_run(r) and
                  (r.benchmark, r.split, r.pool) == (run.benchmark, run.split, run.pool)]
    if not candidates or answer_kind(get_benchmark(run.benchmark).kind).check_gold is None:  # code: by tests
        return {}
    reference = max(candidates, key=lambda r: store.count(r.run_id))  # the bank's run, not an abandoned one
    bench = get_benchmark(run.benchmark)
    golds = {(r.item_id, r.seed): r.gold for r in store.items(reference.run_id)}
    wrong: dict[Key, int] = {}
    for key, trace in store.traces(reference.run_id, golds).items():
        votes = next((e.get("votes") for e in trace.events if e.get("type") == "return" and e.get("votes")), None)
        if votes and (gold := golds[key]) is not None:
            item = Item(id=key[0], question="", answer=gold)  # what a grader reads: the gold (as explain)
            wrong[key] = sum(not (v and bench.check(v, item)) for v in votes.values())
    return wrong


def teams_lines(store: ResultsStore, run: RunInfo, sources: Mapping[str, int]) -> list[str]:
    """The teams section of one run: where its specs came from (`sources`, as `ResultsStore.spec_sources`
    counts them; the report has read them already), distribution of teams, then agents run by difficulty."""
    rows = {(r.item_id, r.seed): r for r in store.items(run.run_id)}
    tops = store.topologies(run.run_id)
    by_team: dict[str, list[ItemRow]] = defaultdict(list)
    for key, top in tops.items():
        if key in rows:
            by_team[team_signature(top)].append(rows[key])
    if not by_team:
        return []
    lines = [f"### Teams written by {shown_method(run.method)} ({run.benchmark} `{run.split}`, {len(rows)} (item, "
             f"seed) pairs, {len(by_team)} distinct teams)", "", "| team | items | share | accuracy (%) | agents run |",
             "|---|---:|---:|---:|---:|"]
    lines[1:1] = _sources_lines(sources)
    for team, team_rows in sorted(by_team.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"| `{team}` | {len(team_rows)} | {100 * len(team_rows) / len(rows):.0f} % | "
                     f"{100 * statistics.mean(r.correct for r in team_rows):.1f} | "
                     f"{statistics.mean(agents_run(r) for r in team_rows):.2f} |")
    return [*lines, "", *_difficulty_lines(rows, voters_wrong(store, run))]


#: How the report names each source of a spec (`orchestrator.base.Source`).
_SOURCE_WORDS = {"model": "as written", "repaired": "repaired",
                 "fallback": "unusable, so the fallback ran (`repair.fallback_spec`)"}


def _sources_lines(sources: Mapping[str, int]) -> list[str]:
    """`Specs: 14 as written, 18 repaired, 28 unusable, ...`: where the orchestrator's specs came from, when
    any was not its own as written (a team below may then be the fallback, not the policy's choice)."""
    if not set(sources) - {"model", "template"}:
        return []
    said = [f"{sources[k]} {w}" for k, w in _SOURCE_WORDS.items() if sources.get(k)]
    return ["", f"Specs: {', '.join(said)}."]


def _difficulty_lines(rows: Mapping[Key, ItemRow], wrong: Mapping[Key, int]) -> list[str]:
    """Agents run and accuracy by how many of the 5-vote's voters were wrong on the same (item, seed)."""
    buckets: dict[int, list[ItemRow]] = defaultdict(list)
    for key, row in rows.items():
        if key in wrong:
            buckets[wrong[key]].append(row)
    if not buckets:
        return []
    lines = ["| 5-vote voters wrong alone | pairs | agents run | accuracy (%) |", "|---|---:|---:|---:|"]
    lines += [f"| {k} of 5 | {len(b)} | {statistics.mean(agents_run(r) for r in b):.2f} | "
              f"{100 * statistics.mean(r.correct for r in b):.1f} |" for k, b in sorted(buckets.items())]
    return [*lines, ""]


def adaptive_runs(store: ResultsStore, runs: Sequence[RunInfo]) -> list[RunInfo]:
    """The runs whose method writes its own specs (not a fixed baseline: `methods.uses_level`)."""
    return [r for r in runs if not uses_level(r.method) and store.count(r.run_id)]

