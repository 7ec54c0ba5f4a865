"""The type gate: mypy over `src/` (pyproject.toml's `[tool.mypy]`) finds no error (issue 53, point 3).

Why a test: the test command is the one gate every change passes, so an annotation that lies (a reader walking a
trace as the wrong shape, a protocol a class no longer meets) fails here rather than at run time. mypy's cache is
kept under pytest's temporary folder for the session: a clean clone checks cold (a few minutes on 2 cores), a
warm rerun in seconds when `LEMON_MYPY_CACHE` names a lasting folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.typegate
@pytest.mark.timeout(900)
def test_mypy_finds_no_error_in_src(tmp_path_factory: pytest.TempPathFactory) -> None:
    cache = os.environ.get("LEMON_MYPY_CACHE") or str(tmp_path_factory.mktemp("mypy-cache"))
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", cache,
                                "--no-error-summary", str(ROOT / "src" / "lemon")])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 0 and not errors, "mypy over src/ (the type gate):\n" + (out + err)[-20000:]
