"""Every test runs with its own LEMON_HOME (traces, caches, stores), sharing only the assembled model files."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from lemon.paths import models_dir
from tests.benchdata import find_data_dir

# Property tests judge results, never speed: on 2 loaded cores a first example that imports a module took 427 ms
# against hypothesis's 200 ms deadline and failed the suite (tests/runtime/test_stop_rules.py, 2026-11-29).
settings.register_profile("shared-cores", deadline=None)
settings.load_profile("shared-cores")


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
