"""The results store's one open path (issue 52, item 5): another program's SQLite file and a store of another
schema version are refused by readers AND writers before anything is written (the file byte-identical after),
`lemon report` opens read-only, and a row of the wrong shape is one line naming its table and row in every
command that reads it.

On the old code only readers checked the version: `lemon eval` and `lemon report` wrote into a store of
version 2, `report` added LEMON's tables to any SQLite file (and switched it to WAL), and a row with bad JSON
or text in a number column was a traceback in report, runs, export, view, trace and eval."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from lemon.errors import StorageError
from lemon.evaluation.store import ResultsStore, open_existing_store
from tests.cli.test_cli_core import assert_clean_error
from tests.evaluation.test_cli import scripted_pool_yaml

DEADLINE_S = 300.0


def _lemon(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEMON_HOME": str(home), "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "lemon.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=DEADLINE_S, stdin=subprocess.DEVNULL)


def _eval_args(pool: Path, store: Path, data_dir: Path) -> tuple[str, ...]:
    return ("eval", "multiarith", "--method", "vanilla", "--pool", str(pool), "--level", "small", "--limit", "2",
            "--store", str(store), "--data-dir", str(data_dir))


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, Path]:
    """A real store of two items written by `lemon eval` over the scripted pool, and that pool (built once)."""
    folder = tmp_path_factory.mktemp("evaluated")
    pool = scripted_pool_yaml(folder / "pool.yaml", latency_s=0.0)
    store = folder / "results.sqlite"
    done = _lemon(*_eval_args(pool, store, data_dir), home=folder / "home")
    assert done.returncode == 0, done.stderr[-2000:]
    return store, pool


@pytest.fixture
def store(evaluated: tuple[Path, Path], tmp_path: Path) -> Path:
    """A copy of the evaluated store (checkpointed: one file) for one test to change."""
    db = sqlite3.connect(evaluated[0])
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    copy = tmp_path / "results.sqlite"
    shutil.copyfile(evaluated[0], copy)
    return copy


def _sql(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()


def _one_line(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert_clean_error(proc, expected)
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1, proc.stderr


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Another program's SQLite database (rollback journal, as most programs leave theirs)."""
    path = tmp_path / "other.sqlite"
    _sql(path, "CREATE TABLE people (name TEXT, born INTEGER)", "INSERT INTO people VALUES ('Ada', 1815)")
    return path


# ---- another program's file, another version's store: refused by every opener, left byte-identical -------


def test_report_on_another_programs_sqlite_file_changes_nothing(foreign: Path, _isolated_home: Path) -> None:
    before = foreign.read_bytes()
    _one_line(_lemon("report", "--store", str(foreign), home=_isolated_home), "SQLite file of another program")
    assert foreign.read_bytes() == before
    assert sorted(p.name for p in foreign.parent.iterdir()) == ["other.sqlite"]  # no -wal, no -shm, no journal


def test_eval_into_another_programs_sqlite_file_changes_nothing(foreign: Path, evaluated: tuple[Path, Path],
                                                                data_dir: Path, _isolated_home: Path) -> None:
    before = foreign.read_bytes()
    _one_line(_lemon(*_eval_args(evaluated[1], foreign, data_dir), home=_isolated_home),
              "SQLite file of another program")
    assert foreign.read_bytes() == before


def _future(path: Path) -> bytes:
    _sql(path, "UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    return path.read_bytes()


def test_report_and_eval_refuse_a_store_of_another_schema_version(store: Path, evaluated: tuple[Path, Path],
                                                                  data_dir: Path, _isolated_home: Path) -> None:
    before = _future(store)
    _one_line(_lemon("report", "--store", str(store), home=_isolated_home), "has schema version 2")
    _one_line(_lemon(*_eval_args(evaluated[1], store, data_dir), home=_isolated_home), "has schema version 2")
    assert store.read_bytes() == before


@pytest.mark.parametrize("opener", ["writer", "reader"])
def test_every_opener_refuses_before_writing(opener: str, foreign: Path, store: Path) -> None:
    future = _future(store)
    for path, expected, before in ((foreign, "another program", foreign.read_bytes()),
                                   (store, "schema version 2", future)):
        with pytest.raises(StorageError, match=expected) as info:
            ResultsStore(path) if opener == "writer" else open_existing_store(path)
        assert "\n" not in str(info.value) and path.read_bytes() == before


def test_report_opens_read_only_and_adds_no_table(store: Path, _isolated_home: Path) -> None:
    """A store written before `run_seeds` and `explanations` existed: the old report added both tables."""
    _sql(store, "DROP TABLE run_seeds", "DROP TABLE explanations", "PRAGMA journal_mode=DELETE")
    before = store.read_bytes()
    done = _lemon("report", "--store", str(store), home=_isolated_home)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "vanilla" in done.stdout.split()  # the report read the run (a table for the terminal, not Markdown)
    assert store.read_bytes() == before


def test_an_empty_sqlite_file_is_not_a_store_to_read(tmp_path: Path, _isolated_home: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    _one_line(_lemon("report", "--store", str(empty), home=_isolated_home), "SQLite file without tables")
    assert empty.read_bytes() == b""


# ---- rows of the wrong shape: one line naming the table and the row, in every command --------------------

BAD_ROWS = {
    "config": ("UPDATE runs SET config_json = '{not json'", "the runs row"),
    "tokens": ("UPDATE items SET total_tokens = 'many'", "the items row"),
    "tokens_json": ("UPDATE items SET tokens_json = '[1, 2]'", "the items row"),
    "trace": ("UPDATE traces SET trace_json = '{\"events\": '", "the traces row"),
    "trace_shape": ("UPDATE traces SET trace_json = '{\"events\": 5, \"topology\": 3}'", "the traces row"),
}


def _run_and_item(store: Path) -> tuple[str, str]:
    db = sqlite3.connect(store)
    run_id, item_id = db.execute("SELECT run_id, item_id FROM items ORDER BY item_id").fetchone()
    db.close()
    return str(run_id), str(item_id)


@pytest.mark.parametrize(("bad", "command"), [
    ("config", "runs"), ("config", "report"), ("config", "eval"), ("config", "trace"),
    ("tokens", "report"), ("tokens", "export"), ("tokens", "eval"), ("tokens_json", "view"),
    ("trace", "trace"), ("trace", "view"), ("trace_shape", "trace"),
])
def test_a_malformed_row_is_one_line_naming_its_table(bad: str, command: str, store: Path,
                                                      evaluated: tuple[Path, Path], data_dir: Path, tmp_path: Path,
                                                      _isolated_home: Path) -> None:
    run_id, item_id = _run_and_item(store)
    statement, expected = BAD_ROWS[bad]
    _sql(store, statement)
    s = str(store)
    args = {
        "runs": ("runs", "--store", s),
        "report": ("report", "--store", s),
        "eval": _eval_args(evaluated[1], store, data_dir),
        "trace": ("trace", run_id, item_id, "--store", s),
        "export": ("export", "csv", run_id, "--store", s, "--file", str(tmp_path / "out.csv")),
        "view": ("view", run_id, "--store", s, "--file", str(tmp_path / "view.html")),
    }[command]
    proc = _lemon(*args, home=_isolated_home)
    _one_line(proc, expected)
    assert "is malformed" in proc.stderr
