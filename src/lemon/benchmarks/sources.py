"""The packaged catalogue of the benchmarks' upstream data files (`sources.yaml`): where each comes from and
what its bytes must be (sha256 and size).

Why: a fresh clone has no data, and getting it was the first thing users of such projects asked about. The
catalogue is what `lemon data fetch` downloads and verifies (`lemon.benchmarks.fetch`), and what the
missing-data error points at (`fetch_command`). Each upstream URL is pinned to a commit, so a file's hash never
changes; a mirror only has to keep the data directory's layout (`<mirror>/B/NAME`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lemon.errors import LemonError
from lemon.paths import data_dir as resolve_data_dir
from lemon.yamlfile import load_yaml

MAX_FILE_BYTES = 64 << 20  # the largest upstream file is 4 MB (GSM8K train); a bigger pin is a mistake
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class DataFile:
    """One upstream file: `name` below its benchmark's folder, its pinned sha256 and size, its canonical URL."""

    benchmark: str
    name: str
    sha256: str
    size: int
    upstream: str

    @property
    def path(self) -> str:
        """Where it lives relative to the data directory (and to a mirror's root)."""
        return f"{self.benchmark}/{self.name}"


@dataclass(frozen=True)
class BenchmarkData:
    """One benchmark's files, with the provenance and license its upstream states."""

    name: str
    source: str
    license: str
    files: tuple[DataFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def _bad(what: str) -> LemonError:
    return LemonError(f"the packaged lemon/benchmarks/sources.yaml is damaged ({what}); reinstall LEMON")


def _file(bench: str, upstream: str, name: object, pin: object) -> DataFile:
    """One `NAME: [sha256, bytes]` entry, checked: a name that could leave the benchmark's folder is refused."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name.split("/"):
        raise _bad(f"{bench}: file name {name!r}")
    if not (isinstance(pin, list) and len(pin) == 2 and isinstance(pin[0], str) and _SHA256.fullmatch(pin[0])
            and isinstance(pin[1], int) and not isinstance(pin[1], bool) and 0 < pin[1] <= MAX_FILE_BYTES):
        raise _bad(f"{bench}/{name}: expected [sha256, bytes], got {pin!r}")
    return DataFile(bench, name, pin[0], pin[1], upstream + name)


def _benchmark(name: str, entry: Any) -> BenchmarkData:
    if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict) or not entry["files"]:
        raise _bad(f"{name}: no files")
    upstream = entry.get("upstream")
    if not isinstance(upstream, str) or not upstream.startswith("https://") or not upstream.endswith("/"):
        raise _bad(f"{name}: upstream {upstream!r}")
    files = tuple(_file(name, upstream, n, pin) for n, pin in entry["files"].items())
    return BenchmarkData(name, str(entry.get("source", "")), str(entry.get("license", "")), files)


@functools.cache
def catalogue() -> Mapping[str, BenchmarkData]:
    """Every benchmark with packaged data, by name (read once; read-only)."""
    text = (resources.files("lemon.benchmarks") / "sources.yaml").read_text("utf-8")
    data = load_yaml(text)
    if not isinstance(data, dict) or not all(isinstance(k, str) and _NAME.fullmatch(k) for k in data):
        raise _bad("not a mapping of benchmark names")
    return MappingProxyType({name: _benchmark(name, entry) for name, entry in data.items()})


def benchmark_data(name: str) -> BenchmarkData:
    """The packaged files of benchmark `name`, or one line listing the names there are."""
    found = catalogue().get(name)
    if found is None:
        raise LemonError(f"no data to fetch for benchmark {name!r}; valid: {', '.join(sorted(catalogue()))}")
    return found


def fetch_command(bench: str, root: Path, *, force: bool = False) -> str:
    """The command that fetches `bench` into the data directory `root` (`--data-dir` only when it is not the
    default one), as the errors that send a user there spell it."""
    words = ["lemon", "data", "fetch", bench]
    if Path(root) != resolve_data_dir(None):
        words += ["--data-dir", str(root)]
    return " ".join([*words, "--force"] if force else words)


def owner(path: Path) -> tuple[str, Path] | None:
    """The benchmark whose packaged files `path` is (or is a folder of), and the data directory above it; None
    for any other file (a benchmark defined elsewhere reading its own data)."""
    for folder in path.parents:
        bench = catalogue().get(folder.name)
        if bench is None:
            continue
        rel = f"{bench.name}/{path.relative_to(folder).as_posix()}"
        if any(f.path == rel or f.path.startswith(rel + "/") for f in bench.files):
            return bench.name, folder.parent
    return None
