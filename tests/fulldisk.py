"""A real full disk for tests: a small tmpfs mounted on a folder, then filled up to ENOSPC.

Why real: SQLite reports some full-disk failures as plain I/O errors (SQLITE_IOERR_SHMSIZE when a WAL file's
shared memory cannot grow), which a mock would never show. Mounting needs root (CI runs as root); elsewhere
the tests that use it are skipped with the reason."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SIZE = "1m"


def fill(folder: Path) -> None:
    """Write one file until the disk refuses: afterwards nothing more fits."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An empty tmpfs of 1 MiB mounted at tmp_path/disk (fill it with `fill` when the test is ready)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a real full disk) needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0755", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()[:200]}")
    try:
        yield folder
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)
