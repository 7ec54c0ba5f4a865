"""`lemon plot`: training curves from a run's metrics.jsonl, as one PNG (matplotlib, Agg backend)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lemon.errors import LemonError
from lemon.train.config import FAMILIES

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward_mean", "success_mean", "efficiency_mean", "structure_mean")),
    ("validity", ("valid_rate", "canonical_rate", "accuracy")),
    ("worker tokens per step", ("worker_tokens", "rollout_tokens", "cf_tokens")),
    ("node-cache hits", ("node_cache_hits", "cf_cache_hits")),
    ("family selection probability", tuple(f"family_prob/{f}" for f in FAMILIES)),
    ("mean counterfactual Δ", tuple(f"cf_delta_mean/{f}" for f in FAMILIES)),  # every family, `level` too
    ("loss", ("loss_pg", "loss_cf", "kl")),
    # Near 1 the credited tokens cannot move (their gradient is A x (onehot - p)): credit with no effect.
    ("probability of the credited tokens", ("cf_span_p",)),
    ("step time (s)", ("step_s", "gen_s", "exec_s", "update_s")),
)


#: Metrics that are means over a count logged beside them: a row whose count is 0 has no value (runs written
#: before `cf_span_p` was dropped on such steps logged 0.0 there).
MEAN_OVER: dict[str, str] = {"cf_span_p": "cf_span_tokens"}


def _value(row: dict[str, Any], key: str) -> float:
    count = MEAN_OVER.get(key)
    if count is not None and not row.get(count):
        return float("nan")
    return float(row.get(key, float("nan")))


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of `run_dir/metrics.jsonl` (or of the file itself), in step order."""
    path = run_dir / "metrics.jsonl" if run_dir.is_dir() else run_dir
    if not path.is_file():
        raise LemonError(f"no metrics at {path}; pass a run directory written by lemon train")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise LemonError(f"{path} line {n} is not JSON; the file is corrupted") from None
    if not rows:
        raise LemonError(f"{path} has no steps yet")
    return sorted(rows, key=lambda r: r.get("step", 0))


def _smooth(ys: list[float], k: int) -> list[float]:
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= k:
            acc -= ys[i - k]
        out.append(acc / min(i + 1, k))
    return out


def plot_run(run_dir: Path, out: Path, *, smooth: int = 1) -> Path:
    """Draw every panel for which the metrics have data; returns the PNG path."""
    return plot_runs([run_dir], out, smooth=smooth)


def plot_runs(run_dirs: Sequence[Path], out: Path, *, smooth: int = 1) -> Path:
    """One PNG with every panel; several runs (e.g. +CF vs global-only) share the axes, one colour per run."""
    import matplotlib.pyplot as plt

    fig = draw_runs(run_dirs, smooth=smooth)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def draw_runs(run_dirs: Sequence[Path], *, smooth: int = 1) -> Any:
    """The matplotlib Figure of `plot_runs`.

    With a single run each metric gets its own colour; with several, the colour names the run and the line
    style the metric, so two variants of one experiment are compared on the same axes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not run_dirs:
        raise LemonError("lemon plot needs at least one run directory")
    runs = [(_run_label(d), read_metrics(d)) for d in run_dirs]
    all_rows = [r for _, rows in runs for r in rows]
    panels = [(t, [k for k in keys if any(k in r and _value(r, k) == _value(r, k) for r in all_rows)])
              for t, keys in PANELS]
    panels = [(t, ks) for t, ks in panels if ks]
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(11, 3 * nrows), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, keys) in zip(axes.flat, panels, strict=False):
        for r_index, (name, rows) in enumerate(runs):
            steps = [r["step"] for r in rows]
            for k_index, k in enumerate(keys):
                ys = [_value(r, k) for r in rows]
                label = k.split("/")[-1] if "/" in k else k
                style: dict[str, Any] = {"color": colours[k_index % len(colours)]}
                if len(runs) > 1:
                    label = f"{name}: {label}"
                    style = {"color": colours[r_index % len(colours)], "linestyle": _STYLES[k_index % 4]}
                ax.plot(steps, _smooth(ys, smooth) if smooth > 1 else ys, label=label, **style)
        ax.set_title(title + (f" (moving mean of {smooth})" if smooth > 1 else ""))
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(" vs ".join(str(d) for d in run_dirs))
    fig.tight_layout()
    return fig


_STYLES = ("-", "--", ":", "-.")


def _run_label(run_dir: Path) -> str:
    """A run's short name in legends: its directory (the parent for a metrics.jsonl path)."""
    return (run_dir if run_dir.is_dir() else run_dir.parent).name
