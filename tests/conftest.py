"""Every test runs with its own LEMON_HOME (traces, caches, stores), sharing only the assembled model files."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.paths import models_dir
from tests.benchdata import find_data_dir


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark data directory (a missing one fails the test, never skips it)."""
    return find_data_dir()


@pytest.fixture(scope="session")
def shared_models_dir() -> Path:
    """The machine's assembled-model folder, resolved before any test changes LEMON_HOME."""
    return models_dir()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_models_dir: Path) -> Path:
    home = tmp_path / "lemon-home"
    monkeypatch.setenv("LEMON_HOME", str(home))
    monkeypatch.setenv("LEMON_MODELS_DIR", str(shared_models_dir))
    return home
