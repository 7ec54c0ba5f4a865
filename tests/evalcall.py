"""`evaluate_kw`: the tests' one-line way to call `evaluate(settings, plan, execution=...)`.

Tests vary one or two options at a time; this sorts keywords into `EvalSettings`, `EvalPlan` and `Execution` by
their field names (so it never re-lists them) and resolves the method name, with the CLI's defaults for pool
and level. An unknown keyword is a TypeError, as with a real signature.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from lemon.evaluation.evaluate import EvalPlan, EvalSummary, Execution, OnProgress, evaluate
from lemon.evaluation.item import EvalSettings
from lemon.evaluation.methods import resolve_method
from lemon.evaluation.store import ResultsStore


def split_kw(benchmark: str, method: str, **kw: object) -> tuple[EvalSettings, EvalPlan, Execution]:
    """(settings, plan, execution) from one flat set of keywords; pool defaults to cpu, level to medium."""
    parts: list[dict[str, object]] = []
    for cls in (EvalSettings, EvalPlan, Execution):
        names = {f.name for f in fields(cls)}
        parts.append({k: kw.pop(k) for k in list(kw) if k in names})
    if kw:
        raise TypeError(f"unknown evaluate keyword(s): {', '.join(kw)}")
    settings_kw, plan_kw, execution_kw = parts
    settings_kw.setdefault("pool", "cpu")
    settings_kw.setdefault("level", "medium")
    settings = EvalSettings(benchmark=benchmark, method=resolve_method(method), **settings_kw)  # type: ignore[arg-type]
    return settings, EvalPlan(**plan_kw), Execution(**execution_kw)  # type: ignore[arg-type]


async def evaluate_kw(benchmark: str, method: str, *, store: ResultsStore | str | Path | None = None,
                      on_progress: OnProgress | None = None, **kw: object) -> EvalSummary:
    settings, plan, execution = split_kw(benchmark, method, **kw)
    return await evaluate(settings, plan, store=store, execution=execution, on_progress=on_progress)
