"""Where the tests find the six benchmarks' upstream files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def find_data_dir() -> Path:
    """LEMON_DATA_DIR if set, else `<repo>/../shared/data`; fail (not skip) when absent."""
    env = os.environ.get("LEMON_DATA_DIR")
    path = Path(env).expanduser() if env else REPO.parent / "shared" / "data"
    if not path.is_dir():
        pytest.fail(f"benchmark data not found at {path}: set LEMON_DATA_DIR, or clone the repository with "
                    "../shared/data beside it", pytrace=False)
    return path
