"""Bounded numeric options (issue 52, item 6): `--seed` and `--seeds` are checked where the shared options are
declared (`options.BOUNDS`), as the command line is parsed, with one line naming the allowed range.

On the old code `--seeds 1000000000` took all memory (a MemoryError under a memory cap; here under the same
cap as the hostile cache files, so a regression fails fast) and `--seed 99999999999999999999999` was an
OverflowError traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.cli.options import BOUNDS, SHARED, TAKES
from lemon.seeds import MAX_SEED, MAX_SEEDS, stable_seed
from tests.cli.test_cli_core import assert_clean_error
from tests.llm.test_cache_import_bounds import capped_lemon

HUGE = "99999999999999999999999"


def _one_line(args: tuple[str, ...], expected: str, home: Path) -> None:
    proc = capped_lemon(*args, home=home)
    assert_clean_error(proc, expected)
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1, proc.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (("eval", "multiarith", "--method", "vanilla", "--seeds", "1000000000"),
     f"--seeds must be in 1..{MAX_SEEDS}, got 1000000000"),
    (("eval", "multiarith", "--method", "vanilla", "--seeds", "0"), f"--seeds must be in 1..{MAX_SEEDS}, got 0"),
    (("eval", "multiarith", "--method", "vanilla", "--seed", HUGE), f"--seed must be in 0..{MAX_SEED}, got {HUGE}"),
    (("eval", "multiarith", "--method", "vanilla", "--seed", "-1"), f"--seed must be in 0..{MAX_SEED}, got -1"),
    (("run", "What is 2 + 2?", "--pool", "tiny", "--seed", HUGE), f"--seed must be in 0..{MAX_SEED}"),
    (("trace", "abc", "--seed", HUGE), f"--seed must be in 0..{MAX_SEED}"),
    (("train", "--out", "/nonexistent/run", "--seed", HUGE), f"--seed must be in 0..{MAX_SEED}"),
])
def test_an_out_of_range_seed_is_one_line_naming_the_range(args: tuple[str, ...], expected: str, data_dir: Path,
                                                           _isolated_home: Path) -> None:
    store = _isolated_home / "r.sqlite"
    if args[0] == "eval":  # all an evaluation needs, so that only the bound can stop it
        args = (*args, "--data-dir", str(data_dir), "--store", str(store))
    _one_line(args, expected, _isolated_home)
    assert not store.exists()


def test_seeds_past_the_largest_seed_are_refused_together(data_dir: Path, _isolated_home: Path) -> None:
    """Each option in range, their sum not: S..S+K-1 would pass MAX_SEED."""
    _one_line(("eval", "multiarith", "--method", "vanilla", "--seed", str(MAX_SEED), "--seeds", "2", "--data-dir",
               str(data_dir), "--store", str(_isolated_home / "r.sqlite")), f"none above {MAX_SEED}", _isolated_home)
    assert not (_isolated_home / "r.sqlite").exists()


def test_the_bounds_are_the_shared_options_and_hold_every_derived_seed() -> None:
    assert set(BOUNDS) <= set(SHARED) and TAKES["seeds"] == {"eval"}
    assert BOUNDS["seed"] == (0, MAX_SEED) and max(stable_seed(i) for i in range(2000)) <= MAX_SEED
