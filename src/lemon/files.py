"""Guarded reading and atomic writing of the files a user names, and telling a full disk from a bad file.

Why: a FIFO given as a spec path hung `lemon validate` forever (opening it waits for a writer, reading it
for data), a device never ends, and each reader had its own checks. Every spec, pool and data file is read
through `read_regular`: regular files only, opened without blocking, refused past a size bound, one line
naming the problem and the fix. Writers used to leave `.NAME.PID.tmp` behind when the disk filled up, and the
report's temporary name was the same in every process; `write_atomic` uses a fresh name per call and
removes it on every error path. A full disk is reported as a full disk (`disk_full`), not as a damaged file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

from lemon.errors import LemonError

FULL_BELOW_BYTES = 1 << 20  # less free space than this, and a failed write is put down to a full disk
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """What `path` is when it exists and is not a regular file ("a character device", ...); None otherwise."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


def _open_regular(path: Path, what: str, error: type[LemonError]) -> int:
    """An fd of `path` opened for reading without waiting (a FIFO without a writer), checked to be a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist; check the path") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a folder; name a file") from None
    except OSError as exc:
        raise error(f"{what} {path} cannot be read: {exc.strerror or exc}; check the path and its "
                    "permissions") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(f"{what} {path} is {_kind(mode)}, not a regular file; name a file (a FIFO or device "
                    "would block or never end)")
    return fd


def read_regular(path: str | os.PathLike[str], *, limit: int, what: str, error: type[LemonError] = LemonError,
                 size_hint: str = "name the right file") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else raises `error` in one line (a file
    too large ends with `size_hint`)."""
    p = Path(path).expanduser()
    fd = _open_regular(p, what, error)
    too_large = f"{what} {p} is larger than {limit:,} bytes; {size_hint}"
    try:
        if os.fstat(fd).st_size > limit:
            raise error(too_large)
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"{what} {p} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:  # it grew while being read
        raise error(too_large)
    return b"".join(chunks)


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write `data` to `path` through a temporary file unique to this call, renamed over `path` when complete.

    A crash never leaves half a file; any error (a full disk, an interrupt) removes the temporary file and
    is raised as it came (an OSError keeps its errno for `disk_full`)."""
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return p


def free_bytes(folder: str | os.PathLike[str]) -> int | None:
    """Free space where `folder` (or its nearest existing parent) lives; None if it cannot be asked."""
    p = Path(folder)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def disk_full(folder: str | os.PathLike[str], exc: BaseException | None = None) -> bool:
    """Whether a failed write in `folder` is down to a full disk: ENOSPC/EDQUOT, SQLite's SQLITE_FULL, or
    (SQLite reports some as plain I/O errors, e.g. SQLITE_IOERR_SHMSIZE) under a MiB free there."""
    if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
        return True
    name = getattr(exc, "sqlite_errorname", None)
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):  # damaged, whatever the free space
        return False
    if name == "SQLITE_FULL":
        return True
    free = free_bytes(folder)
    return free is not None and free < FULL_BELOW_BYTES
