"""Guarded reading and atomic writing of the files a user names, and telling a full disk from a bad file.

Why: a FIFO given as a spec path hung `lemon validate` forever (opening it waits for a writer, reading it
for data), a device never ends, and each reader had its own checks. Every spec, pool and data file is read
through `read_regular`: regular files only, opened without blocking, refused past a size bound, one line
naming the problem and the fix. Writers used to leave `.NAME.PID.tmp` behind when the disk filled up, and the
report's temporary name was the same in every process; `write_atomic` uses a fresh name per call and
removes it on every error path. A full disk is reported as a full disk (`disk_full`), not as a damaged file.
Renaming over the target replaced `--file /dev/null` (as root) and a symlink such as `/dev/stdout` with a
regular file; `write_atomic` renames over regular files only and writes through devices and pipes, and
`write_output` is the one writer of the files a user names, every failure one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from lemon.errors import LemonError, StorageError

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


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, what: str = "the file") -> Path:
    """Write `data` to `path` without ever replacing anything but a regular file; returns `path`.

    The rule, by what `path` is now (a symlink is followed, and stays a link):
    - absent or a regular file: a temporary file unique to this call, in the same folder, renamed over it when
      complete (keeping the old file's permissions). A crash or a full disk leaves the previous file intact and
      no half file; the temporary file is removed on every error path.
    - this process's standard output or error (`/dev/stdout`, `/dev/stderr`, whether a terminal, a pipe or a
      file the shell opened): written through that descriptor, where the output stands (`>>` keeps what is there).
    - a character device (`/dev/null`, a terminal): written through, never replaced.
    - a FIFO: written through when a reader has it open; without one, refused at once (never a hang).
    - a folder, a block device, a socket: refused, untouched.
    A refusal is a one-line StorageError naming `what`; an I/O error is raised as it came (an OSError keeps
    its errno for `disk_full`)."""
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        st: os.stat_result | None = os.stat(p)
    except FileNotFoundError:  # absent, or a link to nothing yet (then the file it names is created)
        st = None
    if st is not None and not (stat.S_ISREG(st.st_mode) and _std_fd(st) is None):
        _write_through(p, raw, st, what)
        return p
    _replace(Path(os.path.realpath(p)) if p.is_symlink() else p, raw, st.st_mode if st else None)
    return p


def _replace(p: Path, raw: bytes, mode: int | None) -> Path:
    """`raw` into a fresh temporary file beside `p`, renamed over it when complete; `mode`: the old file's."""
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode & 0o777)
            fh.write(raw)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return p


def _std_fd(st: os.stat_result) -> int | None:
    """1 or 2 when `st` is this process's standard output or error (what `/dev/stdout` names), else None."""
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            own = os.fstat(fd)
            if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
                return fd
    return None


def _write_through(p: Path, raw: bytes, st: os.stat_result, what: str) -> None:
    """Write `raw` into the stream `p` names (see `write_atomic`), or refuse it in one line."""
    std = _std_fd(st)
    if std is not None:
        for stream in (sys.stdout, sys.stderr):  # what was printed before comes first
            with contextlib.suppress(Exception):
                stream.flush()
        _write_all(std, raw)
        return
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        fix = "name a file in it" if stat.S_ISDIR(st.st_mode) else "name a regular file"
        raise StorageError(f"cannot write {what} to {p}: it is {_kind(st.st_mode)}; {fix}")
    try:  # O_NONBLOCK: a FIFO without a reader fails at once (ENXIO) instead of waiting for one
        fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise
        raise StorageError(f"cannot write {what} to {p}: it is a FIFO (named pipe) with no reader; start the "
                           "reader first or name a regular file") from None
    try:
        kind = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(kind) or stat.S_ISFIFO(kind)):  # swapped since the stat: never write elsewhere
            raise StorageError(f"cannot write {what} to {p}: it changed while being opened; try again")
        os.set_blocking(fd, True)
        _write_all(fd, raw)
    finally:
        os.close(fd)


def _write_all(fd: int, raw: bytes) -> None:
    view = memoryview(raw)
    while view:
        view = view[os.write(fd, view):]


def write_output(path: str | os.PathLike[str], data: str | bytes, *, what: str,
                 fix: str = "pass --file another path") -> Path:
    """The one writer of a file a user names (reports, plots, exports, pages, traces): `write_atomic` into
    `path` (its folder created), and any failure one StorageError line that says a full disk is full.

    Why: each command had its own writer, and a full disk gave an OSError traceback or a 0-byte file."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(p, data, what=what)
    except OSError as exc:
        if disk_full(p.parent, exc):
            raise StorageError(f"cannot write {what} to {p}: the disk is full; free space there or {fix}") from None
        raise StorageError(f"cannot write {what} to {p} ({exc.strerror or exc}); {fix}") from None


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
