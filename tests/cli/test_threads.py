"""`--threads` on `lemon eval` (issue 25: the README says every command speaks it; eval refused it): the value
reaches every embedded worker model that its pool level does not pin, and a bad value is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.errors import ModelFileError
from lemon.llm.embedded import EmbeddedBackend
from tests.cli.test_cli_core import assert_clean_error, lemon
from tests.evaluation.test_cli import scripted_pool_yaml


def test_eval_takes_threads(tmp_path: Path, data_dir: Path, _isolated_home: Path) -> None:
    pool = scripted_pool_yaml(tmp_path / "pool.yaml", latency_s=0.0)
    proc = lemon("eval", "multiarith", "--method", "vanilla", "--pool", str(pool), "--level", "small", "--limit", "1",
                 "--threads", "1", "--store", str(tmp_path / "r.sqlite"), "--data-dir", str(data_dir),
                 home=_isolated_home)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "computed 1" in proc.stdout


def test_eval_refuses_zero_threads_in_one_line(tmp_path: Path, _isolated_home: Path) -> None:
    proc = lemon("eval", "multiarith", "--method", "vanilla", "--threads", "0", "--store", str(tmp_path / "r.sqlite"),
                 home=_isolated_home)
    assert_clean_error(proc, "--threads must be in 1..256")


def test_embedded_models_take_the_thread_count_unless_their_level_pins_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEMON_THREADS", "3")
    assert EmbeddedBackend("smollm2-135m").n_threads == 3  # nothing loads until the first call
    assert EmbeddedBackend("smollm2-135m", n_threads=2).n_threads == 2
    monkeypatch.setenv("LEMON_THREADS", "0")
    with pytest.raises(ModelFileError, match="LEMON_THREADS"):
        EmbeddedBackend("smollm2-135m")
