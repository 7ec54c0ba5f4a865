"""A training run's directory: run.json, metrics, kept samples, checkpoints and the resume protocol.

Layout: `run.json` (settings, config, data split and item ids, versions), `metrics.jsonl` (one row per
step), `samples.jsonl` (every sampled spec of every step, with its reward and counterfactual), and
`checkpoints/step-N` (model, optimizer, sampler state). Checkpoints are written to a temporary directory and
renamed into place, so a crash never leaves a half-written checkpoint that `--resume` would load; rows of
steps after the resumed checkpoint are dropped from both JSONL files, since they will be recomputed.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lemon.errors import LemonError

CHECKPOINTS = "checkpoints"
COMPLETE = "COMPLETE"
METRICS = "metrics.jsonl"
SAMPLES = "samples.jsonl"
RUN_INFO = "run.json"


@dataclass(frozen=True)
class RunDir:
    """One `lemon train --run-dir` directory."""

    path: Path

    @property
    def info_path(self) -> Path:
        return self.path / RUN_INFO

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    @property
    def samples_path(self) -> Path:
        return self.path / SAMPLES

    def checkpoints(self) -> list[tuple[int, Path]]:
        """Complete checkpoints, oldest first."""
        root = self.path / CHECKPOINTS
        found = []
        for p in root.glob("step-*") if root.is_dir() else []:
            if (p / COMPLETE).is_file():
                try:
                    found.append((int(p.name.split("-", 1)[1]), p))
                except ValueError:
                    continue
        return sorted(found)

    def open(self, info: dict[str, Any], item_ids: Sequence[str], *, resume: bool) -> Path | None:
        """Start a new run (writes run.json) or check a resumed one; returns the checkpoint to resume from."""
        ckpts = self.checkpoints()
        if self.info_path.exists() and not resume:
            raise LemonError(f"run directory {self.path} already holds a run; pass --resume to continue it or "
                             "choose another --out")
        if not resume:
            self.path.mkdir(parents=True, exist_ok=True)
            self.info_path.write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")
            return None
        if not self.info_path.exists():
            raise LemonError(f"--resume: {self.path} holds no run (no {self.info_path.name}); drop --resume")
        recorded = json.loads(self.info_path.read_text(encoding="utf-8"))
        if recorded["data"]["item_ids"] != list(item_ids):
            raise LemonError(f"--resume: the training items differ from those recorded in {self.info_path}; "
                             "use the same --benchmark/--limit")
        # Stopped before its first checkpoint: start again from step 1 (the rows it wrote are dropped).
        step, ckpt = ckpts[-1] if ckpts else (0, None)
        for path in (self.metrics_path, self.samples_path):
            _truncate_jsonl(path, step)
        return ckpt

    def append(self, path: Path, rows: Sequence[Mapping[str, object]]) -> None:
        with path.open("a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, default=str) + "\n")

    def new_checkpoint(self, step: int) -> Path:
        """An empty temporary directory for step N's checkpoint (commit it with `commit_checkpoint`)."""
        root = self.path / CHECKPOINTS
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        return tmp

    def commit_checkpoint(self, tmp: Path, step: int, keep: int) -> Path:
        """Mark `tmp` complete, rename it into place, and drop all but the newest `keep` checkpoints."""
        (tmp / COMPLETE).write_text("ok\n", encoding="utf-8")
        target = self.path / CHECKPOINTS / f"step-{step:06d}"
        if target.exists():
            shutil.rmtree(target)
        os.rename(tmp, target)
        for _, old in self.checkpoints()[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
        return target


def _truncate_jsonl(path: Path, last_step: int) -> None:
    """Drop rows of steps after `last_step` (they will be recomputed)."""
    if not path.is_file():
        return
    keep = [ln for ln in path.read_text(encoding="utf-8").splitlines()
            if ln.strip() and json.loads(ln).get("step", 0) <= last_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(ln + "\n" for ln in keep), encoding="utf-8")
    os.replace(tmp, path)
