"""`lemon view`: a self-contained static HTML page of a results store, a run, an item or a training run."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> Path:
    """Write `text` to `path` through a temporary file, so a failure never leaves half a file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
