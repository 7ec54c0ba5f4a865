"""Tests of the scripts in experiments/ (not a package: each is loaded from its file)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).parents[2] / "experiments"


def load_script(name: str) -> ModuleType:
    """experiments/NAME.py as a module, registered under NAME (its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
