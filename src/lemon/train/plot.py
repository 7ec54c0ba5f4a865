"""`lemon plot`: training curves from a run's metrics.jsonl, as one PNG (matplotlib, Agg backend)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lemon.errors import LemonError

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward_mean", "success_mean", "efficiency_mean", "structure_mean")),
    ("validity", ("valid_rate", "canonical_rate", "accuracy")),
    ("worker tokens per step", ("worker_tokens", "rollout_tokens", "cf_tokens")),
    ("node-cache hits", ("node_cache_hits", "cf_cache_hits")),
    ("family selection probability", ("family_prob/edge", "family_prob/role", "family_prob/capacity")),
    ("mean counterfactual Δ", ("cf_delta_mean/edge", "cf_delta_mean/role", "cf_delta_mean/capacity")),
    ("loss", ("loss_pg", "loss_cf", "kl")),
    ("step time (s)", ("step_s", "gen_s", "exec_s", "update_s")),
)


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    steps = [r["step"] for r in rows]
    panels = [(t, [k for k in keys if any(k in r for r in rows)]) for t, keys in PANELS]
    panels = [(t, ks) for t, ks in panels if ks]
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(11, 3 * nrows), squeeze=False)
    for ax, (title, keys) in zip(axes.flat, panels, strict=False):
        for k in keys:
            ys = [float(r.get(k, float("nan"))) for r in rows]
            ax.plot(steps, _smooth(ys, smooth) if smooth > 1 else ys, label=k.split("/")[-1] if "/" in k else k)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(str(run_dir))
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
