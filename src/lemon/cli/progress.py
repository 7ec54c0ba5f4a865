"""The `lemon eval` progress bar: the library reports `EvalProgress`; drawing it is the CLI's business."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from lemon.evaluation.evaluate import EvalProgress, OnProgress


@contextmanager
def eval_progress_bar(console: Console, *, enabled: bool = True) -> Iterator[OnProgress]:
    """A live bar (done of total, running accuracy and tokens/item) fed by the callback it yields."""
    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                   console=console, disable=not enabled, transient=False)
    shown: list[TaskID] = []

    def on_progress(p: EvalProgress) -> None:
        if not shown:
            shown.append(bar.add_task(p.label, total=p.total, completed=p.done, stats=p.stats))
        else:
            bar.update(shown[0], completed=p.done, stats=p.stats)

    with bar:
        yield on_progress
