"""The viewer's data for a `lemon train` run directory: curves, counterfactual pairs, per-character advantages.

Reads what the trainer writes (`lemon.train.run_dir`): `metrics.jsonl` (one row per step), `samples.jsonl`
(every sampled spec with its reward and counterfactual: family, field, Δ and the field's character span in the
completion) and `run.json` (settings and config). It reads the files only, never imports `lemon.train`
(inspection sits above train).

The heat map recomputes what `batch.build_batch` puts on the completion, per CHARACTER (the trainer works per
token; the page says so): the group advantage (reward − the mean reward of its (step, task) group) on every
character, plus cf_weight·Δ spread evenly over the characters of the edited field's span (the trainer spreads
it over the span's tokens). With `advantage_scale` other than `none` the trainer also divides both terms by one
per-group scale; the page shows them in reward units and says the scale is not shown.

Why one inert JSON block per step: a run of thousands of samples stays fast to open; a step's samples are
parsed only when that step is shown, and at most `max_steps` steps are embedded (evenly spaced, first and last
always), so the page stays a few MB.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lemon.errors import LemonError

METRICS = "metrics.jsonl"
SAMPLES = "samples.jsonl"
RUN_INFO = "run.json"
DEFAULT_MAX_STEPS = 100

Segment = tuple[int, int, float]


def heat_segments(n_chars: int, advantage: float, span: Sequence[int] | None, cf_total: float) -> list[Segment]:
    """Per-character advantage of a completion as runs [start, end, value): `advantage` on every character,
    plus `cf_total` (cf_weight·Δ) spread evenly over the characters of `span` (clamped to the text)."""
    if span is None or cf_total == 0:
        return [(0, n_chars, advantage)] if n_chars else []
    start, end = max(0, min(int(span[0]), n_chars)), max(0, min(int(span[1]), n_chars))
    if end <= start:
        return [(0, n_chars, advantage)] if n_chars else []
    runs = [(0, start, advantage), (start, end, advantage + cf_total / (end - start)), (end, n_chars, advantage)]
    return [r for r in runs if r[1] > r[0]]


def _groups(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The trainer's groups: consecutive rows of one (step, task_id); a sample index that does not grow starts
    a new group (a task drawn twice in one step, at an epoch boundary, is two groups)."""
    out: list[list[dict[str, Any]]] = []
    for r in rows:
        last = out[-1][-1] if out else None
        if (last is None or (last.get("step"), last.get("task_id")) != (r.get("step"), r.get("task_id"))
                or int(r.get("sample", 0)) <= int(last.get("sample", 0))):
            out.append([])
        out[-1].append(r)
    return out


def _edit_text(cf: dict[str, Any], completion: str) -> str:
    """The edit in words: as its family described it when the run stored that (`edit`); for an older run, the
    field and its value before and after, read from the stored span and `edited_value`."""
    if cf.get("edit"):
        return str(cf["edit"])
    f = cf.get("field") or {}
    start, end = (cf.get("span") or [0, 0])[:2]
    where = f"{f.get('kind')} of {f.get('agent', '?')}" + (f" \u2190 {f['parent']}" if f.get("parent") else "")
    return f"{cf.get('family')}: {where}: {completion[start:end] or '?'} \u2192 {cf.get('edited_value') or '(none)'}"


def _sample_json(r: dict[str, Any], advantage: float, cf_weight: float) -> dict[str, Any]:
    text = str(r.get("completion") or "")
    cf = r.get("cf") if isinstance(r.get("cf"), dict) else None
    span = (cf.get("span") if cf else None) or None
    delta = float(cf.get("delta") or 0.0) if cf else 0.0
    out = {"k": r.get("sample"), "text": text, "valid": bool(r.get("valid")), "error": r.get("error"),
           "reward": r.get("reward"), "success": r.get("success"), "adv": advantage, "cf_skip": r.get("cf_skip"),
           "heat": [list(s) for s in heat_segments(len(text), advantage, span, cf_weight * delta)], "cf": None}
    if cf is not None:
        f = cf.get("field") or {}
        out["cf"] = {"family": cf.get("family"), "kind": f.get("kind"), "agent": f.get("agent"),
                     "parent": f.get("parent"), "delta": delta, "span": span, "edit": _edit_text(cf, text)}
    return out


def step_block(step: int, rows: Sequence[dict[str, Any]], cf_weight: float) -> dict[str, Any]:
    """One step's groups, each sample with its advantage, counterfactual and heat-map segments."""
    groups = []
    for g in _groups(rows):
        rewards = [float(r.get("reward") or 0.0) for r in g]
        mean = sum(rewards) / len(rewards)
        groups.append({"task": g[0].get("task_id"), "mean": mean,
                       "samples": [_sample_json(r, rw - mean, cf_weight) for r, rw in zip(g, rewards, strict=True)]})
    return {"step": step, "groups": groups}


def _embedded_steps(steps: Sequence[int], max_steps: int) -> set[int]:
    """At most `max_steps` steps, evenly spaced, the first and the last always among them."""
    if len(steps) <= max_steps:
        return set(steps)
    if max_steps <= 1:
        return set(steps[-max_steps:]) if max_steps else set()
    return {steps[round(i * (len(steps) - 1) / (max_steps - 1))] for i in range(max_steps)}


def _credit(info: dict[str, Any]) -> dict[str, Any]:
    cfg = info.get("config") or {}
    credit, settings = cfg.get("credit") or {}, info.get("settings") or {}
    return {"cf_weight": float(credit.get("cf_weight", 1.0)), "advantage_scale": credit.get("advantage_scale", "none"),
            "kl_beta": credit.get("kl_beta"), "group_size": (cfg.get("group") or {}).get("group_size"),
            "tasks_per_step": (cfg.get("rollout") or {}).get("tasks_per_step"), "cf": settings.get("cf"),
            "families": (cfg.get("sampler") or {}).get("families"), "pool": settings.get("pool"),
            "benchmark": settings.get("benchmark"), "seed": settings.get("seed")}


def training_data(run_dir: Path, blocks: list[str], max_steps: int = DEFAULT_MAX_STEPS) -> dict[str, Any]:
    """The page data of one run directory; each embedded step's samples are appended to `blocks` (lazy)."""
    metrics = read_jsonl(run_dir / METRICS)
    if not metrics:
        raise LemonError(f"{run_dir} has no {METRICS} with at least one step; pass the --run-dir of `lemon train`")
    info = _read_info(run_dir / RUN_INFO)
    credit = _credit(info)
    by_step: dict[int, list[dict[str, Any]]] = {}
    for r in read_jsonl(run_dir / SAMPLES):
        if isinstance(r.get("step"), int):
            by_step.setdefault(r["step"], []).append(r)
    embedded = _embedded_steps(sorted(by_step), max_steps)
    steps = []
    for s in sorted(by_step):
        rows = by_step[s]
        index = -1
        if s in embedded:
            index = len(blocks)
            blocks.append(json.dumps(step_block(s, rows, credit["cf_weight"]), ensure_ascii=False,
                                     separators=(",", ":")))
        steps.append({"step": s, "n": len(rows), "valid": sum(1 for r in rows if r.get("valid")),
                      "pairs": sum(1 for r in rows if isinstance(r.get("cf"), dict)), "block": index})
    curves = [{k: v for k, v in m.items() if k == "step" or (isinstance(v, int | float) and not isinstance(v, bool))}
              for m in metrics if isinstance(m.get("step"), int)]
    return {"name": run_dir.name, "path": str(run_dir), "metrics": curves, "credit": credit,
            "has_info": bool(info), "steps": steps, "max_steps": max_steps}


def _read_info(path: Path) -> dict[str, Any]:
    """run.json, or {} when absent or unreadable (the curves still show; the page says the defaults are used)."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return info if isinstance(info, dict) else {}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (a run killed mid-write) is left out, not an error."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            out.append(row)
    return out
