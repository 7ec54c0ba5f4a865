"""Bad input to a script in experiments/ or benchmarks/ is one line and exit code 2, as in the CLI, never a
traceback (lemon.errors.run_script)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lemon.errors import DataError, run_script
from tests.evaluation.test_cli import scripted_pool_yaml

ROOT = Path(__file__).parents[2]


def test_a_lemon_error_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    def main() -> None:
        raise DataError("data/aqua/test.json: missing; set LEMON_DATA_DIR")

    with pytest.raises(SystemExit) as stop:
        run_script(main)
    assert stop.value.code == 2
    assert capsys.readouterr().err == "error: data/aqua/test.json: missing; set LEMON_DATA_DIR\n"


def test_mains_status_is_the_exit_status_and_a_bug_keeps_its_traceback() -> None:
    with pytest.raises(SystemExit) as stop:
        run_script(lambda: 3)
    assert stop.value.code == 3
    with pytest.raises(SystemExit) as done:
        run_script(lambda: None)
    assert done.value.code == 0
    with pytest.raises(ZeroDivisionError):
        run_script(lambda: 1 / 0)


def _stop_rule_table(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "stop_rules_table.py"), "--store",
                           str(tmp / "s.sqlite"), "--benchmarks", "aqua", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120, cwd=tmp)


def test_the_stop_rule_table_on_a_store_without_its_bank_says_so_in_one_line(tmp_path: Path, data_dir: Path) -> None:
    """Bad input to a script: the store lacks the bank it replays (lemon.evaluation.bank raised SystemExit,
    exit 1, from library code), then the bank is there but the data folder is not (a 40-line traceback)."""
    res = _stop_rule_table(tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.splitlines() == ["error: no 5-voter sc-cot run of aqua test at large in the store: run "
                                       "experiments/adaptive_cpu.sh bank (or train-bank) first"]
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", 0.0)
    bank = subprocess.run([sys.executable, "-m", "lemon.cli.main", "eval", "aqua", "--method", "sc-cot", "--agents",
                           "5", "--level", "large", "--limit", "1", "--pool", str(pool), "--store",
                           str(tmp_path / "s.sqlite")], env={**os.environ, "LEMON_DATA_DIR": str(data_dir)},
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bank.returncode == 0, bank.stderr[-2000:]
    res = _stop_rule_table(tmp_path, LEMON_DATA_DIR=str(tmp_path / "no-data"))
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "LEMON_DATA_DIR" in lines[0], res.stderr
    # data and bank there, but no reply's score (the gate's teams need one): one line naming both ways out
    res = _stop_rule_table(tmp_path, "--pool", str(pool), LEMON_DATA_DIR=str(data_dir))
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "team sure" in lines[0] and "--online" in lines[0] and "--no-gates" in lines[0]
    res = _stop_rule_table(tmp_path, "--pool", str(pool), "--no-gates", LEMON_DATA_DIR=str(data_dir))
    assert res.returncode == 0 and "| agree 2 of 3 |" in res.stdout, res.stderr[-2000:]
