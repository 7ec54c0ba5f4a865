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

pytestmark = [pytest.mark.typegate, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return os.environ.get("LEMON_MYPY_CACHE") or str(tmp_path_factory.mktemp("mypy-cache"))


def _mypy(cache: str, *args: str) -> tuple[str, int]:
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", cache,
                                "--no-error-summary", *args])
    return out + err, status


def test_mypy_finds_no_error_in_src(mypy_cache: str) -> None:
    out, status = _mypy(mypy_cache, str(ROOT / "src" / "lemon"))
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 0 and not errors, "mypy over src/ (the type gate):\n" + out[-20000:]


def test_a_script_sees_the_public_api_typed_not_any(mypy_cache: str, tmp_path: Path) -> None:
    """`lemon.run` and the rest are imported lazily (`lemon.__getattr__`); a type checker still reads their own
    signatures, so a script's mistakes are found (an `Any` there would hide every one)."""
    script = tmp_path / "script.py"
    script.write_text("import lemon\n"
                      "reveal_type(lemon.run)\nreveal_type(lemon.read_trace('x').events)\nreveal_type(lemon.Spec)\n"
                      "lemon.read_trace(3)\n")
    out, _ = _mypy(mypy_cache, str(script))
    revealed = [line.split("Revealed type is ", 1)[1] for line in out.splitlines() if "Revealed type is" in line]
    assert len(revealed) == 3 and not any(r == '"Any"' for r in revealed), out
    assert "lemon.api.session.Result" in revealed[0] and "TraceEvent" in revealed[1], out
    assert 'Argument 1 to "read_trace" has incompatible type "int"' in out, out
