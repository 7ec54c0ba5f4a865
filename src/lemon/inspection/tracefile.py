"""A trace saved by `lemon run` / `lemon exec` as a one-item run, so every reader of stored runs reads it too.

Why: `lemon trace`, `view`, `explain` and the exports were written against the results store, so the trace a
`lemon run` prints (`LEMON_HOME/runs/trace-<id>.json`) could be opened by none of them. Rather than a second
code path in each reader, the file is loaded into an in-memory results store holding one run (id = the trace
id) with one item; the readers then work unchanged. A run has no gold answer: its row has `gold` None, which
the readers show as "no gold" rather than right or wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeGuard

from lemon.errors import LemonError
from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.paths import runs_dir
from lemon.runtime.trace import Trace

TRACE_PREFIX = "trace-"
_ID = re.compile(r"[0-9a-f]{4,32}")
Extractor = Callable[[str], "str | None"]


def answer_extractor(kind: str | None) -> Extractor | None:
    """How the answer of a task of this kind is read from an agent's text (None: the whole text is the answer)."""
    from lemon.orchestrator.kinds import reply_extractor

    return reply_extractor(kind)


def vote_key(kind: str | None) -> Extractor | None:
    """How a `majority_vote` of `lemon run` compares answers of this kind: by the extracted answer (a number, a
    letter, the program), as `lemon eval` does (`lemon.orchestrator.kinds.reply_extractor`)."""
    return answer_extractor(kind)


def extracted_answer(task: str, text: str) -> str | None:
    """The answer in `text` for the kind `task` asks for (`lemon.orchestrator.kinds.extracted_answer`)."""
    from lemon.orchestrator.kinds import extracted_answer as answer_in

    return answer_in(task, text)


def is_trace(data: object) -> TypeGuard[dict[str, object]]:
    """A runtime trace (not a spec, not another JSON document): it has a topology and an event list."""
    return isinstance(data, dict) and isinstance(data.get("topology"), dict) and isinstance(data.get("events"), list)


def read_trace(path: Path) -> Trace:
    """The trace in `path`, read through the typed model (`Trace.from_json`: an older version upgraded); one line
    if the file is not JSON, not a LEMON trace, or a trace of a newer version than this LEMON reads."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LemonError(f"{path} is not a readable trace ({' '.join(str(exc).split())[:120]}); pass the "
                         "trace-<id>.json that `lemon run` printed") from None
    if not is_trace(data):
        raise LemonError(f"{path} is JSON but not a LEMON trace (no topology and events); pass the "
                         "trace-<id>.json that `lemon run` printed")
    if data.get("trace_id") is None:  # the file's name carries it (`lemon run` names it trace-<id>.json)
        data["trace_id"] = path.stem.removeprefix(TRACE_PREFIX)
    try:
        return Trace.from_json(data, source=str(path))
    except TypeError as exc:
        raise LemonError(f"{path} is not a readable trace ({' '.join(str(exc).split())[:120]}); pass the "
                         "trace-<id>.json that `lemon run` printed") from None


def looks_like_trace(path: Path) -> bool:
    """Whether `path` is a trace file (cheap for the common cases: a store, a spec YAML, a folder)."""
    if not path.is_file() or path.suffix != ".json":
        return False
    try:
        return is_trace(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False


def find_trace(selector: str, folder: Path | None = None) -> Path | None:
    """The trace file `selector` names: a path to one, or a trace id (or unique prefix of 4+ characters) of
    a trace in `folder` (default LEMON_HOME/runs). None when nothing matches; one line when several do."""
    path = Path(selector).expanduser()
    if looks_like_trace(path):
        return path
    name = selector.removeprefix(TRACE_PREFIX).removesuffix(".json")
    if not _ID.fullmatch(name):
        return None
    where = folder or runs_dir()
    found = sorted(where.glob(f"{TRACE_PREFIX}{name}*.json")) if where.is_dir() else []
    if len(found) > 1:
        raise LemonError(f"trace id prefix {name!r} matches {len(found)} traces in {where} "
                         f"({', '.join(p.name for p in found[:3])}); give more characters")
    return found[0] if found else None


def _levels_used(trace: Trace) -> str:
    """The capacity levels the run's agents used, weakest first (a run chooses them per agent)."""
    order = list(trace.system.get("levels") or [])
    used = {str(a.get("capacity")) for a in trace.topology.get("agents") or []}
    ranked = sorted(used, key=lambda lv: (order.index(lv) if lv in order else len(order), lv))
    return "+".join(ranked) or "-"


def trace_run(trace: Trace, path: Path) -> RunInfo:
    """The run a trace file stands for: its id is the trace id, its method how the spec was written."""
    from lemon.inspection.itemview import orchestrator_event
    from lemon.orchestrator.kinds import task_kind

    system = trace.system
    orch = orchestrator_event(trace)
    mtime = path.stat().st_mtime
    return RunInfo(run_id=trace.trace_id, benchmark="run",
                   split=task_kind(trace.task or ""), method=str(orch.get("source")) if orch else "exec",
                   pool=str(system.get("pool_ref") or system.get("pool") or "-"), level=_levels_used(trace),
                   seeds=1, n_items=1, config={k: system.get(k) for k in ("temperature", "max_tokens")},
                   created=mtime, updated=mtime)


def trace_row(trace: Trace, path: Path) -> ItemRow:
    """The one (item, seed) row of a trace file: the extracted answer as prediction, no gold."""
    from lemon.inspection.itemview import orchestrator_event, stop_event

    metrics, costs, system = trace.metrics, trace.costs, trace.system
    status = str(metrics.get("status") or stop_event(trace).get("reason") or "ok")
    output = str(trace.topology.get("output", ""))
    answer = trace.contents.get(output)
    prediction = extracted_answer(trace.task or "", answer) if status == "ok" and answer else None
    orch = orchestrator_event(trace)
    return ItemRow(item_id=str(trace.task_id or "task"), seed=int(system.get("seed") or 0),
                   prediction=prediction, gold=None, correct=False, tokens=dict(metrics.get("tokens_by_agent") or {}),
                   total_tokens=int(costs.get("tokens") or 0), latency_s=float(costs.get("wall_clock_s") or 0.0),
                   trace_id=trace.trace_id, status=status,
                   stop_reason=str(stop_event(trace).get("detail") or "") or None,
                   orchestrator_tokens=int(orch.get("tokens") or 0) if orch else 0, created=path.stat().st_mtime,
                   trace_json=trace.compact_json())


def trace_store(path: Path) -> tuple[ResultsStore, RunInfo]:
    """An in-memory results store holding the trace file at `path` as one run of one item."""
    trace = read_trace(path)
    run = trace_run(trace, path)
    db = ResultsStore(":memory:")
    db.ensure_run(run.run_id, benchmark=run.benchmark, split=run.split, method=run.method, pool=run.pool,
                  level=run.level, seeds=1, n_items=1, config=run.config)
    db.put(run.run_id, trace_row(trace, path))
    stored = db.run(run.run_id)
    assert stored is not None
    return db, stored


class Source:
    """What a reader command was pointed at: a results store (and maybe one of its runs), or a trace file."""

    def __init__(self, db: ResultsStore, run: RunInfo | None, trace_path: Path | None = None) -> None:
        self.db, self.run, self.trace_path = db, run, trace_path

    @property
    def label(self) -> str:
        """What the page or message names as the source."""
        return str(self.trace_path or self.db.path)

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.close()


def _names_a_file(target: str) -> bool:
    """A target written as a file (a folder in it, or a suffix such as .sqlite or .json), not a run or trace id."""
    path = Path(target)
    return len(path.parts) > 1 or (bool(path.suffix) and not _ID.fullmatch(target))


def open_source(target: str | None, store: Path, *, writable: bool = False) -> Source:
    """The store or trace file `target` names: a trace file (path or trace id of `lemon run`), a store file, or
    a run id (or unique prefix) of `store`; None: `store` with no run chosen. Run ids of the store win over
    trace ids; a name that is neither is one line naming both places looked in. A store is opened read-only
    unless `writable` (`lemon explain` stores its attribution)."""
    from lemon.evaluation.store import open_existing_store

    if target is None:
        return Source(open_existing_store(store, writable=writable), None)
    path = Path(target).expanduser()
    if path.is_file() and not looks_like_trace(path):
        return Source(open_existing_store(path, writable=writable), None)
    trace_path = find_trace(target)
    if trace_path is None and _names_a_file(target):  # a file that is not there, whatever the store holds
        raise LemonError(f"no file {target}: nothing to read there; check the path (a results store is the file "
                         f"`lemon eval --store FILE` writes, a trace the file `lemon run` prints), or create the "
                         f"store with `lemon eval BENCHMARK --method METHOD --store {target}`")
    if store.is_file() and (trace_path is None or not path.is_file()):
        db = open_existing_store(store, writable=writable)
        try:
            return Source(db, db.resolve_run(target))
        except LemonError:
            db.close()
            if trace_path is None:
                raise
    if trace_path is None:
        raise LemonError(f"no run or trace {target!r}: no results store at {store} and no {TRACE_PREFIX}{target}*.json "
                         f"in {runs_dir()}; pass a trace file or trace id that `lemon run` printed, or a run id of "
                         "`lemon runs --store FILE`")
    db, run = trace_store(trace_path)
    return Source(db, run, trace_path)
