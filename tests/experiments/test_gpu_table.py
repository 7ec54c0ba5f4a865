"""experiments/gpu.sh's table plan for real on this CPU (the `tiny` pool in place of `large`): the cells a GPU
draws come back as a sample bank, and this machine's table replays them from it with no worker call."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", **extra}


def _lemon(*args: str, home: Path, data_dir: Path) -> str:
    res = subprocess.run([sys.executable, "-m", "lemon.cli.main", *args], capture_output=True, text=True,
                         timeout=300, env=_env(LEMON_HOME=str(home), LEMON_DATA_DIR=str(data_dir)))
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _completions(home: Path, data_dir: Path, tmp: Path) -> int:
    out = _lemon("cache", "export", str(tmp / f"count-{os.urandom(4).hex()}.jsonl.gz"), home=home, data_dir=data_dir)
    return int(re.search(r"exported (\d+) completions", out).group(1))


def test_the_cells_drawn_there_replay_here_from_the_bank_they_bring_back(tmp_path: Path, data_dir: Path) -> None:
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "data").symlink_to(data_dir)  # where stage wheels unpacks the carried data there
    (work / "files").mkdir()
    shutil.copy(shutil.which("bwrap"), work / "files" / "bwrap")  # carried: the GPU image has no bubblewrap
    env = _env(WORK=str(work), PLAN="table", POOL="tiny", TABLE_BENCHES="aqua", TABLE_METHODS="chain", LIMIT="1",
               SEEDS="1", TABLE_JOBS="1", MAX_TOKENS_AQUA="48", STAGE_LEFT_S="400")
    res = subprocess.run(["bash", str(ROOT / "experiments" / "gpu.sh"), "stage", "table"], capture_output=True,
                         text=True, timeout=600, env=env, cwd=ROOT)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    bank = work / "out" / "table-bank.jsonl.gz"
    drawn = re.search(r"worker tokens per item ([\d,.]+)", (work / "table-aqua.log").read_text()).group(1)
    assert "--method chain" in (work / "out" / "table-runs.log").read_text()
    assert os.access(work / "site" / "bin" / "bwrap", os.X_OK)  # where the stages' PATH finds the sandbox

    here = tmp_path / "here"
    _lemon("cache", "import", str(bank), home=here, data_dir=data_dir)
    before = _completions(here, data_dir, tmp_path)
    out = _lemon("eval", "aqua", "--method", "chain", "--limit", "1", "--seeds", "1", "--pool", "tiny", "--level",
                 "large", "--max-tokens", "48", "--store", str(tmp_path / "here.sqlite"), home=here, data_dir=data_dir)
    assert f"worker tokens per item {drawn}" in out, out
    assert _completions(here, data_dir, tmp_path) == before  # every reply came from the bank: none drawn here


def test_the_runtime_banks_drawn_there_replay_here(tmp_path: Path, data_dir: Path) -> None:
    """BANK_STAGES: the table plan runs experiments/runtime_bank.sh's test stage (issue 54's banks) instead of the
    table's cells, at rehearsal size, and what it drew replays here with no worker call (program voters too)."""
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "data").symlink_to(data_dir)
    (work / "files").mkdir()
    shutil.copy(shutil.which("bwrap"), work / "files" / "bwrap")  # the program voters' sandbox, carried
    env = _env(WORK=str(work), PLAN="table", POOL="tiny", BANK_STAGES="test", TEST_LIMIT="1", CHOICE_TEST_LIMIT="0",
               TEST_SEEDS="1", MAX_TOKENS="32", TABLE_JOBS="1", STAGE_LEFT_S="500")
    res = subprocess.run(["bash", str(ROOT / "experiments" / "gpu.sh"), "stage", "table"], capture_output=True,
                         text=True, timeout=900, env=env, cwd=ROOT)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    runs = (work / "out" / "table-runs.log").read_text()
    assert "gsm8k --method sc-pot --agents 5 --split test --limit 1 --seeds 1" in runs
    assert "aqua" not in runs  # CHOICE_TEST_LIMIT=0: no choice item asked

    here = tmp_path / "here"
    _lemon("cache", "import", str(work / "out" / "table-bank.jsonl.gz"), home=here, data_dir=data_dir)
    before = _completions(here, data_dir, tmp_path)
    out = _lemon("eval", "gsm8k", "--method", "sc-pot", "--agents", "5", "--split", "test", "--limit", "1",
                 "--seeds", "1", "--pool", "tiny", "--level", "large", "--max-tokens", "32",
                 "--store", str(tmp_path / "here.sqlite"), home=here, data_dir=data_dir)
    assert "items not ok: 0" in out, out
    assert _completions(here, data_dir, tmp_path) == before  # every voter came from the bank
