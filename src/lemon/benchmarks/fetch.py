"""Downloading the benchmarks' upstream data files into the data directory: bounded, verified, atomic, resumable.

Why: a fresh clone has no data, and `lemon eval svamp` could only say a file was missing. `lemon data fetch`
gets each file the packaged catalogue names (`lemon.benchmarks.sources`) from its pinned upstream URL, or
from a mirror with the data directory's layout (`--mirror URL` or `LEMON_DATA_MIRROR`), and:

- bounds every download: the pinned size (a server announcing or sending more is cut off there), a connect,
  a read and a per-file timeout, a few files at a time;
- verifies the sha256 of the bytes before anything is written, and refuses a mismatch in one line;
- places a verified file atomically (`lemon.files.write_output`: a temporary file renamed over the target), so
  no partial or unverified file is ever in place;
- skips a file already there with the pinned hash (re-running resumes), and never replaces a present file
  whose hash differs unless asked (`force`); the refusal names the file and the command that replaces it.

Transfer encodings are turned off (`Accept-Encoding: identity`, no automatic decompression): the hash is of the
bytes as stored upstream, and a gzip file is never unpacked on the way (nor a small reply inflated).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from lemon import __version__
from lemon.benchmarks.sources import DataFile, benchmark_data, catalogue, fetch_command
from lemon.errors import DataError, LemonError
from lemon.files import not_regular, write_output
from lemon.paths import data_dir as resolve_data_dir

MIRROR_ENV = "LEMON_DATA_MIRROR"
CHUNK_BYTES = 1 << 16

OnBytes = Callable[[int], None]


@dataclass(frozen=True)
class Limits:
    """How long and how wide a fetch may go: seconds to connect, between two reads, per file; files at once."""

    connect_s: float = 30.0
    read_s: float = 60.0
    file_s: float = 600.0
    concurrency: int = 8


@dataclass(frozen=True)
class Plan:
    """What a fetch will do in `root`: the files to download (`replace`: those of them present with another
    hash, replaced because `force` was given) and those already in place with the pinned hash."""

    root: Path
    benchmarks: tuple[str, ...]
    todo: tuple[DataFile, ...]
    present: tuple[DataFile, ...]
    replace: tuple[DataFile, ...]

    @property
    def todo_bytes(self) -> int:
        return sum(f.size for f in self.todo)

    def counts(self, bench: str) -> tuple[int, int, int]:
        """Files fetched, bytes fetched and files already in place, for one benchmark."""
        todo = [f for f in self.todo if f.benchmark == bench]
        return len(todo), sum(f.size for f in todo), sum(f.benchmark == bench for f in self.present)


def resolve_mirror(explicit: str | None = None) -> str | None:
    """The mirror to fetch from (explicit, else LEMON_DATA_MIRROR, else None: the upstream URLs), checked to be
    an http(s) URL with a host."""
    url = explicit or os.environ.get(MIRROR_ENV) or None
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise LemonError(f"the data mirror must be an http(s) URL such as https://host/lemon-data, got {url!r} "
                         f"(from --mirror or {MIRROR_ENV})")
    return url.rstrip("/")


def url_of(f: DataFile, mirror: str | None) -> str:
    """Where `f` is downloaded from: `<mirror>/<benchmark>/<name>`, or its pinned upstream URL."""
    return f"{mirror}/{f.path}" if mirror else f.upstream


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _is_pinned(path: Path, f: DataFile, root: Path) -> bool | None:
    """None when `path` is absent; whether it holds the pinned bytes otherwise. Anything but a regular file
    there (a folder, a FIFO) is the user's to move: one line, even with force."""
    kind = not_regular(path)
    if kind is not None:
        raise DataError(f"{path} is {kind}, not the data file {f.path}; move it aside, then run "
                        f"`{fetch_command(f.benchmark, root)}`")
    if not path.exists():
        return None
    try:
        return path.stat().st_size == f.size and _sha256(path) == f.sha256
    except OSError as exc:
        raise DataError(f"cannot read {path} to verify it: {exc.strerror or exc}; check its permissions") from None


def plan_fetch(names: Sequence[str], data_dir: str | os.PathLike[str] | None = None, *,
               force: bool = False) -> Plan:
    """What fetching benchmarks `names` (none: all) into the data directory would do. A present file whose hash
    differs is refused in one line (nothing fetched) unless `force`: it may be a user's edit."""
    root = resolve_data_dir(data_dir)
    benches = [benchmark_data(n) for n in dict.fromkeys(names)] or list(catalogue().values())
    todo, present, replace = [], [], []
    for f in (f for b in benches for f in b.files):
        pinned = _is_pinned(root / f.path, f, root)
        if pinned:
            present.append(f)
            continue
        if pinned is False and not force:
            raise DataError(f"{root / f.path} is present but is not the pinned file (its sha256 or size differs: "
                            "a local edit or a damaged copy); it was left as it is: move it aside, or replace "
                            f"it with `{fetch_command(f.benchmark, root, force=True)}`")
        todo.append(f)
        if pinned is False:
            replace.append(f)
    return Plan(root, tuple(b.name for b in benches), tuple(todo), tuple(present), tuple(replace))


def _refused(f: DataFile, url: str, why: str) -> DataError:
    """Bytes that are not the pinned file's."""
    return DataError(f"{f.path} from {url}: {why}; refused, nothing written in its place; re-run to fetch it again "
                     "(files already verified are kept), or fetch from another --mirror")


def _unreached(f: DataFile, url: str, why: str) -> DataError:
    """No bytes at all: the network, the server or the mirror's layout."""
    return DataError(f"cannot fetch {f.path} from {url}: {why}; nothing was written in its place; check the network "
                     f"and re-run (files already verified are kept), or fetch from a mirror (--mirror URL or "
                     f"{MIRROR_ENV})")


async def _download(session: aiohttp.ClientSession, f: DataFile, url: str, limits: Limits,
                    on_bytes: OnBytes) -> bytes:
    """The body of `url`, at most `f.size` bytes: a server that announces or sends more is cut off."""
    timeout = aiohttp.ClientTimeout(total=limits.file_s, sock_connect=limits.connect_s, sock_read=limits.read_s)
    try:
        async with session.get(url, timeout=timeout) as resp:
            if resp.status != 200:
                raise _unreached(f, url, f"the server answered HTTP {resp.status} {resp.reason or ''}".rstrip())
            if resp.content_length is not None and resp.content_length != f.size:
                raise _refused(f, url, f"the server announces {resp.content_length:,} bytes, the pinned file has "
                                       f"{f.size:,}")
            body = bytearray()
            async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
                body += chunk
                if len(body) > f.size:
                    raise _refused(f, url, f"the server sent more than the pinned {f.size:,} bytes; cut off")
                on_bytes(len(chunk))
    except TimeoutError:
        raise _unreached(f, url, f"no answer within the limits (connect {limits.connect_s:g} s, between reads "
                               f"{limits.read_s:g} s, whole file {limits.file_s:g} s)") from None
    except aiohttp.ClientError as exc:
        raise _unreached(f, url, f"{type(exc).__name__}: {exc}") from None
    return bytes(body)


def _verify(f: DataFile, url: str, body: bytes) -> None:
    """The pinned size and sha256, or one line saying which differs."""
    if len(body) != f.size:
        raise _refused(f, url, f"{len(body):,} bytes arrived, the pinned file has {f.size:,}")
    got = hashlib.sha256(body).hexdigest()
    if got != f.sha256:
        raise _refused(f, url, f"sha256 {got[:16]}... is not the pinned {f.sha256[:16]}... (a damaged download or "
                               "another file)")


async def _fetch_one(session: aiohttp.ClientSession, gate: asyncio.Semaphore, f: DataFile, plan: Plan,
                     mirror: str | None, limits: Limits, on_bytes: OnBytes) -> None:
    url = url_of(f, mirror)
    async with gate:
        body = await _download(session, f, url, limits, on_bytes)
    _verify(f, url, body)
    write_output(plan.root / f.path, body, what=f"the data file {f.path}",
                 fix="pass --data-dir a writable folder")


def _first_error(group: BaseExceptionGroup) -> BaseException:
    """The first LemonError of a failed task group (one line to show), else the group itself (a bug)."""
    for exc in group.exceptions:
        found = _first_error(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if isinstance(found, LemonError):
            return found
    return group


async def _fetch_all(plan: Plan, mirror: str | None, limits: Limits, on_bytes: OnBytes) -> None:
    headers = {"Accept-Encoding": "identity", "User-Agent": f"lemon/{__version__} (lemon data fetch)"}
    gate = asyncio.Semaphore(limits.concurrency)
    async with aiohttp.ClientSession(headers=headers, auto_decompress=False, trust_env=True) as session:
        try:
            async with asyncio.TaskGroup() as group:
                for f in plan.todo:
                    group.create_task(_fetch_one(session, gate, f, plan, mirror, limits, on_bytes))
        except BaseExceptionGroup as failed:
            raise _first_error(failed) from None


def run_plan(plan: Plan, *, mirror: str | None = None, limits: Limits = Limits(),
             on_bytes: OnBytes = lambda n: None) -> None:
    """Download, verify and place every file of `plan.todo` (a few at a time); the first failure stops the rest
    and is raised as one line. `on_bytes(n)` is told of each chunk received (a progress bar)."""
    if plan.todo:
        asyncio.run(_fetch_all(plan, mirror, limits, on_bytes))
