"""The LLM cache's portable form (`lemon cache export/import`): a lossless, byte-stable round trip on real
SQLite files, imports that never overwrite and change nothing when the file is bad, and the CLI's one-line
errors."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lemon.errors import StorageError
from lemon.llm.base import Completion
from lemon.llm.cache import SQLiteCache
from lemon.llm.cache_file import export_cache, import_cache
from tests.cli.test_cli_core import assert_clean_error, lemon

_keys = st.text("0123456789abcdef", min_size=64, max_size=64)
_completions = st.dictionaries(_keys, st.tuples(st.text(max_size=40), st.integers(0, 10**6),
                                                st.integers(0, 10**6)), max_size=8)
_scores = st.dictionaries(_keys, st.floats(-1e6, 0.0, allow_nan=False), max_size=4)


def _key(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def _filled(path: Path, completions: dict[str, tuple[str, int, int]], scores: dict[str, float]) -> SQLiteCache:
    cache = SQLiteCache(path)
    for key, (text, pt, ct) in completions.items():
        cache.put(key, Completion(text, pt, ct, 0.0, "m"))
    for key, value in scores.items():
        cache.put_score(key, "m", value)
    return cache


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(completions=_completions, scores=_scores)
def test_an_export_imported_into_an_empty_cache_holds_the_same_rows(
        tmp_path_factory: pytest.TempPathFactory, completions: dict[str, tuple[str, int, int]],
        scores: dict[str, float]) -> None:
    folder = tmp_path_factory.mktemp("rt")
    source = _filled(folder / "a.sqlite", completions, scores)
    file = folder / "bank.jsonl.gz"
    assert export_cache(source, file).completions == len(completions)
    target = SQLiteCache(folder / "b.sqlite")
    done = import_cache(target, file)
    assert (done.completions, done.scores, done.kept) == (len(completions), len(scores), 0)
    assert target.completion_rows() == source.completion_rows()
    assert target.score_rows() == source.score_rows()
    again = folder / "again.jsonl.gz"
    export_cache(target, again)
    assert again.read_bytes() == file.read_bytes()  # byte-stable: an unchanged bank changes nothing in git


def test_an_import_adds_only_missing_keys_and_never_overwrites(tmp_path: Path) -> None:
    export = tmp_path / "bank.jsonl.gz"
    export_cache(_filled(tmp_path / "a.sqlite", {_key(1): ("exported", 1, 2), _key(2): ("new", 3, 4)},
                         {_key(3): -1.5}), export)
    target = _filled(tmp_path / "b.sqlite", {_key(1): ("drawn here", 5, 6)}, {})
    done = import_cache(target, export)
    assert (done.completions, done.scores, done.kept) == (1, 1, 1)
    assert target.get(_key(1)) == ("drawn here", 5, 6) and target.get(_key(2)) == ("new", 3, 4)
    assert target.get_score(_key(3)) == -1.5


def _gz(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode()))
    return path


HEADER = '{"format": "lemon-llm-cache/1", "completions": 1, "scores": 0}\n'


@pytest.mark.parametrize(("content", "expected"), [
    (None, "does not exist; check the path"),
    (b"plain text", "is not a cache export"),
    ('{"format": "other"}\n', "line 1 is not a lemon-llm-cache/1 header"),
    (HEADER + '{"completion": ["k", "m", "t", 1, 2]}\n', "line 2: a completion must be"),
    (HEADER + f'{{"completion": ["{_key(1)}", "m", "t", -1, 2]}}\n', "line 2: a completion must be"),
    (HEADER + "{not json\n", "line 2: not JSON"),
    (HEADER + '{"other": 1}\n', "line 2: neither a completion nor a score"),
    (HEADER, "the header counts 1 completions and 0 scores, the file holds 0 and 0"),
    ('{"format": "lemon-llm-cache/1", "completions": 0, "scores": 1}\n'
     f'{{"score": ["{_key(1)}", "m", NaN]}}\n', "line 2: a score must be"),
])
def test_a_bad_file_is_one_line_and_adds_nothing(tmp_path: Path, content: str | bytes | None, expected: str
                                                 ) -> None:
    file = tmp_path / "bank.jsonl.gz"
    if isinstance(content, bytes):
        file.write_bytes(content)
    elif content is not None:
        _gz(file, content)
    target = _filled(tmp_path / "b.sqlite", {_key(5): ("kept", 1, 1)}, {})
    with pytest.raises(StorageError) as info:
        import_cache(target, file)
    message = str(info.value)
    assert expected in message and "\n" not in message
    assert target.completion_rows() == [(_key(5), "m", "kept", 1, 1)] and target.score_rows() == []


def test_a_valid_row_before_a_bad_one_is_not_imported(tmp_path: Path) -> None:
    file = _gz(tmp_path / "bank.jsonl.gz", '{"format": "lemon-llm-cache/1", "completions": 2, "scores": 0}\n'
               f'{{"completion": ["{_key(1)}", "m", "good", 1, 2]}}\n{{"completion": [1]}}\n')
    target = SQLiteCache(tmp_path / "b.sqlite")
    with pytest.raises(StorageError, match="line 3"):
        import_cache(target, file)
    assert target.completion_rows() == []


def test_the_cli_exports_and_imports_between_two_homes(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    _filled(first / "llm-cache.sqlite", {_key(1): ("a sample", 10, 20)}, {_key(2): -3.0}).close()
    file = tmp_path / "bank" / "cpu.jsonl.gz"
    out = lemon("cache", "export", str(file), home=first)
    assert out.returncode == 0 and "exported 1 completions and 1 scores" in out.stdout, out.stderr
    got = lemon("cache", "import", str(file), home=second)
    assert got.returncode == 0 and "imported 1 completions and 1 scores" in got.stdout, got.stderr
    assert SQLiteCache(second / "llm-cache.sqlite").get(_key(1)) == ("a sample", 10, 20)
    again = lemon("cache", "import", str(file), home=second)
    assert "imported 0 completions and 0 scores" in again.stdout and "(2 already there)" in again.stdout
    assert_clean_error(lemon("cache", "import", str(tmp_path / "missing.gz"), home=second), "does not exist")
