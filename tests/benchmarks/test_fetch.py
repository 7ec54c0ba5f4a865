"""`lemon data fetch` (issue 53, point 6) against a real HTTP server on 127.0.0.1 serving the shared data with
the layout the packaged catalogue names: files land verified and load; a damaged, oversized, stalled or absent
download leaves nothing in place and says so in one line; a present file that differs is never replaced
silently; the missing-data error names the command."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lemon.benchmarks.base import DataBenchmark
from lemon.benchmarks.fetch import Limits, plan_fetch, resolve_mirror, run_plan
from lemon.benchmarks.registry import BENCHMARKS, load_split
from lemon.benchmarks.sources import _file, catalogue
from lemon.errors import DataError, LemonError
from tests.benchmarks.mirror import serve_folder


def lemon(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("LEMON_DATA_DIR", "LEMON_DATA_MIRROR")}
    return subprocess.run([sys.executable, "-m", "lemon.cli.main", *args],
                          env={**full, "COLUMNS": "200", **(env or {})}, capture_output=True, text=True,
                          timeout=300, cwd=cwd, stdin=subprocess.DEVNULL)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def files_in(folder: Path) -> list[str]:
    """Every file under `folder`, hidden temporary files included."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())


def test_the_catalogue_pins_exactly_the_shared_data(data_dir: Path) -> None:
    """sources.yaml was derived from shared/data's SHA256SUMS: every file, its sha256 and size; every benchmark
    of the registry, and every source a loader reads lies inside a benchmark's files."""
    pinned = {f.path: (f.sha256, f.size) for b in catalogue().values() for f in b.files}
    sums = dict(reversed(line.split()) for line in (data_dir / "SHA256SUMS").read_text().splitlines())
    assert set(pinned) == set(sums) and len(pinned) == 178
    for path, (sha, size) in pinned.items():
        assert sha == sums[path] and size == (data_dir / path).stat().st_size, path
    assert set(catalogue()) == set(BENCHMARKS)
    for bench in BENCHMARKS.values():
        assert isinstance(bench, DataBenchmark)
        for src in bench.sources.values():
            assert any(p == src.path or p.startswith(src.path + "/") for p in pinned), src.path
    assert all(f.upstream.startswith("https://raw.githubusercontent.com/") for b in catalogue().values()
               for f in b.files)


@pytest.mark.parametrize("name", ["../evil", "/etc/passwd", "a/../../b", "dev/../x.csv", ""])
def test_a_catalogue_name_that_leaves_its_folder_is_refused(name: str) -> None:
    with pytest.raises(LemonError, match=r"sources\.yaml is damaged"):
        _file("svamp", "https://example.org/", name, ["0" * 64, 1])


def test_fetch_then_eval_loads_and_a_rerun_downloads_nothing(data_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    with serve_folder(data_dir) as mirror:
        proc = lemon("data", "fetch", "svamp", "humaneval", "--data-dir", str(dest), "--mirror", mirror.url,
                     cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert sorted(mirror.requests) == ["/humaneval/HumanEval.jsonl.gz", "/svamp/SVAMP.json"]
        assert files_in(dest) == ["humaneval/HumanEval.jsonl.gz", "svamp/SVAMP.json"]
        for rel in files_in(dest):
            assert (dest / rel).read_bytes() == (data_dir / rel).read_bytes()
        assert "svamp: fetched 1 file (340.0 kB, sha256 verified)" in proc.stdout
        assert len(load_split("svamp", "test", data_dir=dest)) == 800
        assert len(load_split("humaneval", "test", data_dir=dest)) == 124
        again = lemon("data", "fetch", "svamp", "humaneval", "--data-dir", str(dest), "--mirror", mirror.url,
                      cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert len(mirror.requests) == 2, "a verified file is never downloaded again"
        assert "svamp: 1 file already in place and verified" in again.stdout


def test_every_benchmark_by_default_from_the_mirror_env(data_dir: Path, tmp_path: Path) -> None:
    """No name: all six (MMLU's 171 CSVs too) into ./data, the mirror named by LEMON_DATA_MIRROR; every split
    then loads from it."""
    with serve_folder(data_dir) as mirror:
        proc = lemon("data", "fetch", cwd=tmp_path, env={"LEMON_DATA_MIRROR": mirror.url + "/"})
        assert proc.returncode == 0, proc.stderr
        assert len(mirror.requests) == 178
    dest = tmp_path / "data"
    for path in files_in(dest):
        assert hashlib.sha256((dest / path).read_bytes()).hexdigest() == hashlib.sha256(
            (data_dir / path).read_bytes()).hexdigest()
    assert len(files_in(dest)) == 178
    assert len(load_split("mmlu", "val", data_dir=dest)) == 1531
    assert len(load_split("gsm8k", "test", data_dir=dest)) == 1319


def test_a_corrupted_byte_is_refused_in_one_line_and_nothing_is_left(data_dir: Path, tmp_path: Path) -> None:
    served = tmp_path / "mirror"
    shutil.copytree(data_dir / "svamp", served / "svamp")
    raw = bytearray((served / "svamp" / "SVAMP.json").read_bytes())
    raw[1000] ^= 1
    (served / "svamp" / "SVAMP.json").write_bytes(bytes(raw))
    dest = tmp_path / "data"
    with serve_folder(served) as mirror:
        proc = lemon("data", "fetch", "svamp", "--data-dir", str(dest), "--mirror", mirror.url, cwd=tmp_path)
    line = one_error_line(proc)
    assert "svamp/SVAMP.json" in line and "sha256" in line and "refused, nothing written" in line
    assert not dest.exists() or files_in(dest) == []


def test_a_present_file_that_differs_is_kept_unless_forced(data_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    (dest / "multiarith").mkdir(parents=True)
    mine = dest / "multiarith" / "MultiArith.json"
    mine.write_text("[]")
    with serve_folder(data_dir) as mirror:
        proc = lemon("data", "fetch", "multiarith", "--data-dir", str(dest), "--mirror", mirror.url, cwd=tmp_path)
        line = one_error_line(proc)
        assert str(mine) in line and f"lemon data fetch multiarith --data-dir {dest} --force" in line
        assert mine.read_text() == "[]" and mirror.requests == []
        forced = lemon("data", "fetch", "multiarith", "--data-dir", str(dest), "--mirror", mirror.url, "--force",
                       cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert f"note: replacing {mine}" in forced.stderr
    assert mine.read_bytes() == (data_dir / "multiarith" / "MultiArith.json").read_bytes()
    assert files_in(dest) == ["multiarith/MultiArith.json"]


@pytest.mark.parametrize(("mode", "said"), [("endless", "sent more than the pinned 339,970 bytes; cut off"),
                                            ("announce", "announces 1,073,741,824 bytes")])
def test_a_server_that_sends_too_much_is_cut_off(mode: str, said: str, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    with serve_folder(tmp_path, mode) as mirror:
        with pytest.raises(DataError) as info:
            run_plan(plan_fetch(["svamp"], dest), mirror=mirror.url)
        assert said in str(info.value) and "\n" not in str(info.value)
        if mode == "endless":  # the server learns of the hang-up at its next write
            deadline = time.monotonic() + 30
            while not mirror.sent and time.monotonic() < deadline:
                time.sleep(0.05)
            assert mirror.sent and mirror.sent[0] < (64 << 20), "the client hung up long before the server's end"
    assert not dest.exists() or files_in(dest) == []


def test_a_stalled_server_times_out_in_one_line(tmp_path: Path) -> None:
    dest = tmp_path / "data"
    with serve_folder(tmp_path, "stall") as mirror, \
            pytest.raises(DataError, match=r"cannot fetch svamp/SVAMP\.json .*no answer within the limits"):
        run_plan(plan_fetch(["svamp"], dest), mirror=mirror.url, limits=Limits(read_s=0.3))
    assert not dest.exists()


def test_a_file_the_mirror_lacks_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with serve_folder(tmp_path / "empty") as mirror:
        proc = lemon("data", "fetch", "aqua", "--data-dir", str(tmp_path / "data"), "--mirror", mirror.url,
                     cwd=tmp_path)
    line = one_error_line(proc)
    assert "cannot fetch aqua/" in line and "HTTP 404" in line and "--mirror" in line


@pytest.mark.parametrize(("args", "said"), [
    (["data", "fetch", "svamp", "nope"], "no data to fetch for benchmark 'nope'; valid: aqua, gsm8k, humaneval"),
    (["data", "fetch", "svamp", "--mirror", "ftp://host/x"], "the data mirror must be an http(s) URL"),
])
def test_bad_names_are_one_line(args: list[str], said: str, tmp_path: Path) -> None:
    assert said in one_error_line(lemon(*args, cwd=tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_folder_where_a_file_goes_is_refused_even_with_force(tmp_path: Path) -> None:
    (tmp_path / "svamp" / "SVAMP.json").mkdir(parents=True)
    with pytest.raises(DataError, match=r"SVAMP.json is a folder, not the data file svamp/SVAMP.json; move it"):
        plan_fetch(["svamp"], tmp_path, force=True)


def test_mirror_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEMON_DATA_MIRROR", "https://example.org/lemon-data/")
    assert resolve_mirror() == "https://example.org/lemon-data"
    assert resolve_mirror("http://127.0.0.1:9") == "http://127.0.0.1:9"


def test_the_missing_data_error_names_the_fetch_command(tmp_path: Path) -> None:
    """`lemon eval` without data: one line naming `lemon data fetch BENCH` (with --data-dir when not the default)."""
    line = one_error_line(lemon("eval", "svamp", "-m", "cot", "--limit", "1", cwd=tmp_path))
    assert line.startswith("error: data/svamp/SVAMP.json: missing") and "`lemon data fetch svamp`" in line
    elsewhere = tmp_path / "elsewhere"
    with pytest.raises(DataError) as info:
        load_split("mmlu", "val", data_dir=elsewhere)
    assert f"`lemon data fetch mmlu --data-dir {elsewhere}`" in str(info.value)


def test_the_progress_callback_counts_every_byte(data_dir: Path, tmp_path: Path) -> None:
    """What the CLI's bar is fed: each chunk as it arrives, summing to the plan's bytes."""
    plan = plan_fetch(["svamp", "humaneval"], tmp_path)
    seen: list[int] = []
    with serve_folder(data_dir) as mirror:
        run_plan(plan, mirror=mirror.url, on_bytes=seen.append)
    assert sum(seen) == plan.todo_bytes == 339970 + 44877 and len(seen) > 2
    assert plan_fetch(["svamp", "humaneval"], tmp_path).todo == ()


def test_a_file_of_no_packaged_benchmark_keeps_the_plain_hint() -> None:
    """A benchmark defined elsewhere reading its own file under a folder named svamp: no fetch command that
    would not get it."""
    from lemon.benchmarks.files import data_error

    msg = str(data_error(Path("/x/svamp/mine/f.json"), "missing", "JSON"))
    assert "lemon data fetch" not in msg and msg.endswith("(see docs/benchmarks.md, \"Getting the data\")")
    assert "set LEMON_DATA_DIR" in msg
