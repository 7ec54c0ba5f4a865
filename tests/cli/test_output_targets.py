"""A file to write that is not a regular file (issue 52, item 2): never replaced, written through or refused.

Every writer renamed a temporary file over its target, so as root `--file /dev/null`, or a symlink such as
`/dev/stdout`, became a regular file. The commands run as a person runs them (tests/writers.py lists them);
the device nodes are made in the test's own folder (mknod needs root), so the old code replaced only those, and
`/dev/stdout` is reached through a symlink of ours to it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_cli_core import assert_clean_error, lemon
from tests.writers import WRITERS, written_store

__all__ = ["written_store"]  # the fixture, used by name

DEADLINE_S = 120.0  # process start-up on a loaded 2-core machine; a hang never ends


def _node(path: Path, kind: int, device: tuple[int, int]) -> Path:
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    try:
        os.mknod(path, kind | 0o666, os.makedev(*device))
    except OSError as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return path


def _others(folder: Path, *keep: Path) -> list[str]:
    """What lies in `folder` besides `keep`: a temporary file left behind, a replacement."""
    return sorted(p.name for p in folder.iterdir() if p not in keep)


@pytest.mark.parametrize("command", list(WRITERS))
def test_a_character_device_is_written_through_never_replaced(command: str, written_store, tmp_path: Path,
                                                              _isolated_home: Path) -> None:
    """Old code: the node (a copy of /dev/null) became a regular file holding the output."""
    writer = WRITERS[command]
    null = _node(tmp_path / f"null{writer.suffix}", stat.S_IFCHR, (1, 3))
    proc = lemon(*writer.args(written_store, null), home=_isolated_home, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    assert _others(tmp_path, null, _isolated_home) == []


@pytest.mark.parametrize("command", list(WRITERS))
def test_a_symlink_stays_a_link_and_its_file_gets_the_output(command: str, written_store, tmp_path: Path,
                                                             _isolated_home: Path) -> None:
    """Old code: the link itself was replaced by a regular file, and the file it named kept its old text."""
    writer = WRITERS[command]
    real, link = tmp_path / f"real{writer.suffix}", tmp_path / f"link{writer.suffix}"
    real.write_bytes(b"old")
    real.chmod(0o644)
    link.symlink_to(real.name)
    proc = lemon(*writer.args(written_store, link), home=_isolated_home, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert link.is_symlink() and os.readlink(link) == real.name
    assert real.read_bytes() not in (b"", b"old")
    assert stat.S_IMODE(real.stat().st_mode) == 0o644  # the file keeps its permissions
    assert _others(tmp_path, real, link, _isolated_home) == []


def test_dev_stdout_into_a_pipe_is_written_through(written_store, tmp_path: Path, _isolated_home: Path) -> None:
    """`--file /dev/stdout`, here through a link of ours to it (the old code replaced the link it was given)."""
    out = tmp_path / "stdout.csv"
    out.symlink_to("/dev/stdout")
    proc = lemon(*WRITERS["export csv"].args(written_store, out), home=_isolated_home, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("run_id,") and f"wrote {out}" in proc.stdout
    assert out.is_symlink()


def test_dev_stdout_appended_to_a_file_keeps_what_was_there(written_store, tmp_path: Path,
                                                             _isolated_home: Path) -> None:
    """`lemon trace ... --file /dev/stdout >> log`: the trace is added where the output stands, the log kept."""
    out, log = tmp_path / "stdout.json", tmp_path / "log.txt"
    out.symlink_to("/dev/stdout")
    log.write_text("earlier lines\n")
    env = {**os.environ, "LEMON_HOME": str(_isolated_home), "COLUMNS": "160"}
    with log.open("a") as fh:
        done = subprocess.run([sys.executable, "-m", "lemon.cli.main", *WRITERS["trace"].args(written_store, out)],
                              env=env, stdout=fh, stderr=subprocess.PIPE, text=True, timeout=DEADLINE_S,
                              stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    text = log.read_text()
    assert text.startswith("earlier lines\n{") and f"wrote {out}" in text
    assert out.is_symlink()


def test_a_fifo_with_a_reader_gets_the_output(written_store, tmp_path: Path, _isolated_home: Path) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there before the command starts
    try:
        proc = lemon(*WRITERS["export csv"].args(written_store, fifo), home=_isolated_home, timeout=DEADLINE_S)
        got = os.read(reader, 1 << 16)  # the table fits in the pipe's buffer
    finally:
        os.close(reader)
    assert proc.returncode == 0, proc.stderr
    assert got.startswith(b"run_id,") and got.count(b"\n") == 1 + 2 * len(written_store.items)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("command", ["export csv", "view", "cache export"])
def test_a_fifo_without_a_reader_is_one_line_at_once(command: str, written_store, tmp_path: Path,
                                                     _isolated_home: Path) -> None:
    """Old code: the FIFO was replaced by a regular file. Opening it to write would wait for a reader forever."""
    fifo = tmp_path / f"pipe{WRITERS[command].suffix}"
    os.mkfifo(fifo)
    start = time.monotonic()
    proc = lemon(*WRITERS[command].args(written_store, fifo), home=_isolated_home, timeout=DEADLINE_S)
    assert_clean_error(proc, f"{fifo}: it is a FIFO (named pipe) with no reader; start the reader first")
    assert time.monotonic() - start < DEADLINE_S
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _others(tmp_path, fifo, _isolated_home) == []


@pytest.mark.parametrize("command", ["trace", "report --file", "export inspect"])
def test_a_folder_is_one_line_and_left_alone(command: str, written_store, tmp_path: Path,
                                             _isolated_home: Path) -> None:
    """Old code: an IsADirectoryError traceback from the rename (and for the report, a line without the fix)."""
    folder = tmp_path / f"folder{WRITERS[command].suffix}"
    folder.mkdir()
    (folder / "kept.txt").write_text("kept")
    proc = lemon(*WRITERS[command].args(written_store, folder), home=_isolated_home, timeout=DEADLINE_S)
    assert_clean_error(proc, f"{folder}: it is a folder; name a file in it")
    assert [p.name for p in folder.iterdir()] == ["kept.txt"]
    assert _others(tmp_path, folder, _isolated_home) == []


def test_a_block_device_is_refused_untouched(written_store, tmp_path: Path, _isolated_home: Path) -> None:
    """Writing through a block device would overwrite a disk; replacing it loses the node. Neither happens."""
    disk = _node(tmp_path / "disk.html", stat.S_IFBLK, (7, 200))  # a loop device this machine does not have
    proc = lemon(*WRITERS["view"].args(written_store, disk), home=_isolated_home, timeout=DEADLINE_S)
    assert_clean_error(proc, f"{disk}: it is a block device; name a regular file")
    assert stat.S_ISBLK(os.lstat(disk).st_mode)
    assert _others(tmp_path, disk, _isolated_home) == []
