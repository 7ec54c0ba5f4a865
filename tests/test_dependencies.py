"""Every import in the package, the tests, the benchmarks and the experiments is a dependency pyproject.toml
declares directly. A package installed by hand on a working machine (scipy once was), or one that only arrives
through another package, would otherwise pass here and fail on a fresh virtualenv. The check is deptry's (the
tool the field uses for this), configured under `[tool.deptry]`; the second test shows it can fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def deptry(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deptry", ".", "--config", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_every_import_is_a_declared_dependency() -> None:
    result = deptry(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_undeclared_import_fails_the_check(tmp_path: Path) -> None:
    """scipy is imported only by the tests; without its line in the test extra the check names it."""
    lines = (ROOT / "pyproject.toml").read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.lstrip().startswith('"scipy')]
    assert len(kept) == len(lines) - 1
    (tmp_path / "pyproject.toml").write_text("".join(kept))
    result = deptry(tmp_path / "pyproject.toml")
    assert result.returncode != 0
    assert "'scipy' imported but" in result.stdout + result.stderr
