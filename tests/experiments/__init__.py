"""Tests of the scripts in experiments/ (not a package: each is loaded from its file)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
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


def scripted_bank(tmp_path: Path, data_dir: Path, after: Callable[[str], None] = lambda method: None,
                  ) -> tuple[Path, Path, dict[str, str]]:
    """A sample bank as `lemon eval` builds it on the scripted test-double pool: SVAMP `train` items 1-2, seed 0,
    the 5-vote (sc-cot), its replies' scores (cges) and the program voters (sc-pot), `after` called after each.
    Returns the pool file, the store and the environment (LEMON_HOME under tmp_path)."""
    from tests.evaluation.test_cli import scripted_pool_yaml

    pool = scripted_pool_yaml(tmp_path / "pool.yaml", 0.0)
    store = tmp_path / "bank.sqlite"
    env = {**os.environ, "LEMON_HOME": str(tmp_path / "home"), "LEMON_DATA_DIR": str(data_dir), "COLUMNS": "200"}
    for method in ("sc-cot", "cges", "sc-pot"):
        done = subprocess.run([sys.executable, "-m", "lemon.cli.main", "eval", "svamp", "--method", method,
                               "--agents", "5", "--split", "train", "--limit", "2", "--seeds", "1", "--pool", str(pool),
                               "--level", "large", "--store", str(store)], env=env, capture_output=True, text=True,
                              timeout=300, cwd=EXPERIMENTS.parent)
        assert done.returncode == 0, done.stderr[-2000:]
        after(method)
    return pool, store, env
