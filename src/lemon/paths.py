"""Where LEMON keeps state on disk: one cache root, overridable by environment.

Nothing is written inside the source tree; runs, caches and assembled model files live under
`LEMON_HOME` (default `~/.cache/lemon`).
"""

from __future__ import annotations

import os
from pathlib import Path

from lemon.errors import StorageError


def lemon_home() -> Path:
    """Root of LEMON's on-disk state (`LEMON_HOME`, default `~/.cache/lemon`)."""
    root = os.environ.get("LEMON_HOME")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "lemon"


def models_dir() -> Path:
    """Where split model packages are assembled into single GGUF files (`LEMON_MODELS_DIR` overrides)."""
    env = os.environ.get("LEMON_MODELS_DIR")
    return Path(env).expanduser() if env else lemon_home() / "models"


def llm_cache_path() -> Path:
    """The persistent request-keyed LLM cache (SQLite)."""
    return lemon_home() / "llm-cache.sqlite"


def runs_dir() -> Path:
    """Default place for run traces."""
    return lemon_home() / "runs"


def data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The benchmark data directory: explicit argument, else `LEMON_DATA_DIR`, else `./data`."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("LEMON_DATA_DIR")
    return Path(env).expanduser() if env else Path("data")


def ensure_dir(path: Path, what: str) -> Path:
    """Create the folder `path` (with parents) for `what`, or raise `StorageError` naming the fix: an
    unwritable or misplaced LEMON_HOME is one line, found before any model call is paid for."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create the folder {path} for {what}: {exc.strerror or exc}; point LEMON_HOME "
                           "(or the command's path option) at a writable folder") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise StorageError(f"the folder {path} for {what} is not writable; point LEMON_HOME (or the command's "
                           "path option) at a writable folder")
    return path
