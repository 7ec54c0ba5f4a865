"""Full disks and odd paths (issue 26, item 6): no temporary file left behind, a full disk said as such, unique
temporary names, and no journal created beside a device given as the store.

The full disk is real (a 1 MiB tmpfs filled to ENOSPC, tests/fulldisk.py); the commands run as a person runs
them, in their own process."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from lemon.errors import StorageError
from lemon.evaluation.report import write_report
from lemon.evaluation.store import ResultsStore
from lemon.files import write_atomic
from lemon.llm import models
from lemon.llm.cache import SQLiteCache
from tests.cli.test_cli_core import GOOD, assert_clean_error, lemon
from tests.evaluation.test_cli import scripted_pool_yaml
from tests.fulldisk import fill, small_disk
from tests.writers import WRITERS, written_store

__all__ = ["small_disk", "written_store"]  # the fixtures, used by name


def _litter(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp") or p.name.startswith("."))


def test_a_trace_on_a_full_disk_leaves_no_temporary_file_and_says_disk_full(tmp_path: Path, small_disk: Path,
                                                                            _isolated_home: Path) -> None:
    spec, pool = tmp_path / "spec.yaml", scripted_pool_yaml(tmp_path / "pool.yaml", latency_s=0.0)
    spec.write_text(GOOD)
    fill(small_disk)
    proc = lemon("exec", str(spec), "What is 2+2?", "--pool", str(pool), "--out", str(small_disk),
                 "--no-cache", home=_isolated_home, timeout=300)
    assert_clean_error(proc, "the disk is full")
    assert "answer" in proc.stdout.lower()  # the result was shown before the trace failed
    assert _litter(small_disk) == []  # old code: .trace-<id>.json.<pid>.tmp stayed


def test_a_report_on_a_full_disk_is_one_line_and_leaves_nothing(small_disk: Path) -> None:
    """Old code: an OSError traceback from `lemon report`, and `results.md.tmp` left behind."""
    fill(small_disk)
    with pytest.raises(StorageError, match="the disk is full"):
        write_report(small_disk / "results.md", "# a report\n" * 1000)
    assert _litter(small_disk) == []


@pytest.mark.parametrize("command", list(WRITERS))
def test_every_writer_on_a_full_disk_is_one_line_and_keeps_the_previous_file(command: str, written_store,
                                                                             small_disk: Path,
                                                                             _isolated_home: Path) -> None:
    """Issue 52, item 7. Old code: an OSError traceback from view, trace and the exports, a 0-byte PNG in place
    of the previous plot (matplotlib wrote it in place); now one writer, one line, the previous file intact."""
    writer = WRITERS[command]
    target = small_disk / f"out{writer.suffix}"
    target.write_bytes(b"the previous file")
    fill(small_disk)
    proc = lemon(*writer.args(written_store, target), home=_isolated_home, timeout=300)
    assert_clean_error(proc, f"cannot write the {_WHAT[command]} to {target}: the disk is full; free space there")
    assert target.read_bytes() == b"the previous file"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", target.name]


_WHAT = {"cache export": "cache export", "report --file": "report", "report --plot": "plot",
         "export csv": "CSV table", "export otel": "spans", "export inspect": "Inspect log", "view": "page",
         "trace": "JSON", "cache card": "policy card"}


def test_a_plot_on_a_full_disk_leaves_no_empty_png(written_store, small_disk: Path, _isolated_home: Path) -> None:
    """Old code: a traceback and a 0-byte accuracy-vs-tokens.png."""
    fill(small_disk)
    plot = small_disk / "accuracy-vs-tokens.png"
    proc = lemon("report", "--store", str(written_store.store), "--plot", str(plot), home=_isolated_home,
                 timeout=300)
    assert_clean_error(proc, "the disk is full")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_the_report_temporary_file_is_unique_per_call(tmp_path: Path) -> None:
    """Two reports written at once into one file used the same `results.md.tmp`: one clobbered the other's
    half-written file and then failed to rename it. Another process's file at that name is left alone now."""
    out = tmp_path / "results.md"
    theirs = tmp_path / "results.md.tmp"
    theirs.write_text("another process is writing this")
    write_report(out, "# ours\n")
    assert out.read_text() == "# ours\n"
    assert theirs.read_text() == "another process is writing this"
    assert _litter(tmp_path) == ["results.md.tmp"]


def test_an_interrupted_atomic_write_removes_its_temporary_file(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C between writing and renaming: the temporary file goes too (every error path, not only OSError)."""
    def interrupted(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("lemon.files.os.replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "x.json", b"data")
    assert list(tmp_path.iterdir()) == []


def test_an_intact_llm_cache_on_a_full_disk_is_reported_as_a_full_disk(small_disk: Path) -> None:
    path = small_disk / "llm-cache.sqlite"
    SQLiteCache(path).close()  # intact, in WAL mode
    for extra in ("-wal", "-shm"):  # as after a clean close: the next open must create them again
        Path(f"{path}{extra}").unlink(missing_ok=True)
    fill(small_disk)
    with pytest.raises(StorageError) as err:
        SQLiteCache(path)
    message = str(err.value)
    assert "the disk is full" in message and "--no-cache" in message
    assert "delete" not in message and ".bad" not in message  # old code: "delete or rename it"
    (small_disk / "filler").unlink()
    db = sqlite3.connect(path)  # and it was intact all along
    assert db.execute("SELECT COUNT(*) FROM completions").fetchone()[0] == 0
    db.close()


def test_a_new_results_store_on_a_full_disk_says_disk_full(small_disk: Path) -> None:
    fill(small_disk)
    with pytest.raises(StorageError, match="the disk is full"):
        ResultsStore(small_disk / "results.sqlite")


def test_a_hash_stamp_that_cannot_be_written_leaves_no_temporary_file(tmp_path: Path, small_disk: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEMON_MODELS_DIR", str(small_disk))
    (small_disk / "verified").mkdir()
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF weights")
    fill(small_disk)
    models.verify_sha256(model, hashlib.sha256(b"GGUF weights").hexdigest(), "model m")  # warns, still verified
    assert list((small_disk / "verified").iterdir()) == []


@pytest.mark.parametrize("command", ["eval", "report"])
def test_a_device_as_the_store_is_refused_without_creating_a_journal(command: str, tmp_path: Path, data_dir: Path,
                                                                     _isolated_home: Path) -> None:
    journal = Path("/dev/null-journal")
    existed = journal.exists()
    args = (("eval", "multiarith", "--method", "vanilla", "--limit", "1", "--data-dir", str(data_dir),
             "--pool", str(scripted_pool_yaml(tmp_path / "pool.yaml", latency_s=0.0)), "--level", "small")
            if command == "eval" else ("report",))
    try:
        proc = lemon(*args, "--store", "/dev/null", home=_isolated_home, timeout=300)
        assert_clean_error(proc, "/dev/null is a character device, not a regular file")
        assert existed or not journal.exists()
    finally:
        if not existed:
            journal.unlink(missing_ok=True)
