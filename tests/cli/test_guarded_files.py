"""Spec, pool and data paths that are not regular files (issue 26, item 5): one line and exit 2, never a hang.

A FIFO given as SPEC hung `lemon validate` and `lemon exec` forever (opening it waits for a writer). Each
command runs in a real process with a deadline; on the old code the FIFO cases ran into it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lemon.benchmarks.registry import load_split
from lemon.errors import DataError
from lemon.files import read_regular
from tests.cli.test_cli_core import GOOD, assert_clean_error, lemon

DEADLINE_S = 120.0  # process start-up on a loaded 2-core machine; a hang never ends


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", [("validate",), ("exec",)])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_spec_that_is_a_fifo_or_a_device_is_one_line_not_a_hang(command: tuple[str, ...], kind: str, fifo: Path,
                                                                    _isolated_home: Path) -> None:
    spec = str(fifo) if kind == "fifo" else "/dev/zero"
    task = ("2+2?",) if command == ("exec",) else ()
    proc = lemon(*command, spec, *task, "--pool", "tiny", home=_isolated_home, timeout=DEADLINE_S)
    expected = "a FIFO (named pipe), not a regular file" if kind == "fifo" else "a character device"
    assert_clean_error(proc, expected)


def test_a_pool_that_is_a_fifo_is_one_line(tmp_path: Path, fifo: Path, _isolated_home: Path) -> None:
    spec = tmp_path / "good.yaml"
    spec.write_text(GOOD)
    proc = lemon("validate", str(spec), "--pool", str(fifo), home=_isolated_home, timeout=DEADLINE_S)
    assert_clean_error(proc, "pool file")
    assert "FIFO" in proc.stderr


def test_a_data_file_that_is_a_fifo_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "multiarith").mkdir()
    os.mkfifo(tmp_path / "multiarith" / "MultiArith.json")
    with pytest.raises(DataError, match=r"is a FIFO .*LEMON_DATA_DIR"):
        load_split("multiarith", "all", data_dir=tmp_path)


def test_the_guarded_opener_bounds_size_and_reads_files_whole(tmp_path: Path) -> None:
    small, big = tmp_path / "small", tmp_path / "big"
    small.write_bytes(b"x" * 1000)
    big.write_bytes(b"x" * 1001)
    assert read_regular(small, limit=1000, what="test file") == b"x" * 1000
    with pytest.raises(Exception, match="larger than 1,000 bytes"):
        read_regular(big, limit=1000, what="test file")
    with pytest.raises(Exception, match="does not exist"):
        read_regular(tmp_path / "nope", limit=10, what="test file")
    with pytest.raises(Exception, match="is a folder"):
        read_regular(tmp_path, limit=10, what="test file")


def test_a_fifo_with_a_writer_waiting_is_refused_at_once(fifo: Path) -> None:
    """A writer on the other end must not make the FIFO readable as a spec either."""
    writer = subprocess.Popen(["sh", "-c", f"printf 'agents: []' > '{fifo}'"])
    try:
        with pytest.raises(Exception, match="FIFO"):
            read_regular(fifo, limit=100, what="spec file")
    finally:
        writer.kill()
        writer.wait()
