"""The persistent LLM cache, pool configuration errors, and model-file verification (no model needed)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

from lemon.errors import ConfigError, ModelFileError, StorageError
from lemon.llm import models
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.cache import CachedBackend, SQLiteCache
from lemon.llm.pools import load_pool, pool_level_names
from lemon.llm.scripted import ScriptedBackend

REQ = ChatRequest((Message("user", "2+2?"),), GenParams(temperature=0.0, max_tokens=8))


async def test_deterministic_requests_are_served_from_the_file_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    first = ScriptedBackend("m")
    c1 = await CachedBackend(first, SQLiteCache(path)).complete(REQ)
    second = ScriptedBackend("m")  # a new process: new backend, new connection, same file
    cached = CachedBackend(second, SQLiteCache(path))
    c2 = await cached.complete(REQ)
    assert c2.text == c1.text and c2.cached and not c1.cached
    assert second.calls == [] and cached.hits == 1
    seeded = ChatRequest(REQ.messages, GenParams(temperature=0.7, seed=3))
    await cached.complete(seeded)
    await cached.complete(seeded)
    assert len(second.calls) == 1  # sampled with a seed: still deterministic, cached


async def test_unseeded_sampling_and_other_models_are_not_served_from_cache(tmp_path: Path) -> None:
    cache = SQLiteCache(tmp_path / "c.sqlite")
    inner = ScriptedBackend("m")
    cb = CachedBackend(inner, cache)
    sampled = ChatRequest(REQ.messages, GenParams(temperature=0.7))
    await cb.complete(sampled)
    await cb.complete(sampled)
    assert len(inner.calls) == 2
    await cb.complete(REQ)
    other = ScriptedBackend("other-model")
    await CachedBackend(other, cache).complete(REQ)
    assert len(other.calls) == 1  # the model id is part of the key


def _write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "pool.yaml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(("text", "expected"), [
    ("name: x\nlevels: [", "malformed YAML"),
    ("name: x\nlevels:\n  - {name: a, backend: magic, model: m}", "levels.0.backend"),
    ("name: x\nlevels:\n  - {name: a, backend: openai, model: m}", "has no base_url"),
    ("name: x\nlevels:\n  - {name: a, backend: embedded, model: gpt-9}", "unknown embedded model"),
    ("name: x\nlevels:\n  - {name: a, backend: scripted, model: m}\n  - {name: a, backend: scripted, model: m}",
     "unique"),
    ("name: x\ndefaults: {temprature: 0}\nlevels:\n  - {name: a, backend: scripted, model: m}", "defaults"),
])
def test_bad_pool_files_are_one_line_config_errors(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as err:
        load_pool(_write(tmp_path, text), cache=False)
    assert "\n" not in str(err.value)


def test_missing_pool_and_builtin_levels() -> None:
    with pytest.raises(ConfigError, match="neither a built-in pool"):
        load_pool("no-such-pool.yaml")
    assert pool_level_names("cpu") == ("small", "medium", "large")
    tiny = load_pool("tiny", cache=False)
    assert len({id(lv.backend) for lv in tiny.levels}) == 1  # one SmolLM2 shared by every level


def test_hash_mismatch_is_refused_and_names_the_fix(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"not a model")
    with pytest.raises(ModelFileError, match="expected b179c9523d0e") as err:
        models.verify_sha256(f, models.MODELS["smollm2-135m"].sha256, "model smollm2-135m")
    assert "pip install" in str(err.value)


def test_missing_package_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = models.ModelFile("fake", "fake.gguf", "0" * 64, 1, ("lemon_no_such_pkg_part1",))
    monkeypatch.setitem(models.MODELS, "fake", fake)
    with pytest.raises(ModelFileError, match="lemon-no-such-pkg-part1 is not installed"):
        models.ensure_model("fake")


def test_split_parts_are_assembled_only_when_the_hash_matches(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEMON_MODELS_DIR", str(tmp_path / "models"))
    parts = []
    for i, chunk in enumerate([b"abc" * 1000, b"defg" * 1000]):
        p = tmp_path / f"part{i}.bin"
        p.write_bytes(chunk)
        parts.append(p)
    good = hashlib.sha256(b"abc" * 1000 + b"defg" * 1000).hexdigest()
    target = tmp_path / "out" / "m.gguf"
    with pytest.raises(ModelFileError, match="assembled parts"):
        models._assemble(models.ModelFile("m", "m.gguf", "1" * 64, 7000, ("x",)), parts, target)
    assert not target.exists() and not list(target.parent.glob("*.part"))
    models._assemble(models.ModelFile("m", "m.gguf", good, 7000, ("x",)), parts, target)
    assert target.read_bytes() == b"abc" * 1000 + b"defg" * 1000


def test_gpu_layers_come_from_the_environment_and_bad_values_name_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from lemon.llm.embedded import EmbeddedBackend, gpu_layers_from_env

    monkeypatch.delenv("LEMON_GPU_LAYERS", raising=False)
    assert gpu_layers_from_env() == 0
    monkeypatch.setenv("LEMON_GPU_LAYERS", "-1")
    backend = EmbeddedBackend("smollm2-135m")
    assert (backend.n_gpu_layers, backend.n_threads) == (-1, 1)  # offloaded: one feeding thread
    assert EmbeddedBackend("smollm2-135m", n_gpu_layers=0).n_threads >= 1
    monkeypatch.setenv("LEMON_GPU_LAYERS", "all")
    with pytest.raises(ModelFileError, match=r"LEMON_GPU_LAYERS='all'.*-1"):
        gpu_layers_from_env()


# ---- environment and storage faults (issue 12) -------------------------------------------------------------

_LEVEL = "levels:\n  - {name: a, backend: scripted, model: m}\n"
_OPENAI = "name: x\nlevels:\n  - {{name: a, backend: openai, model: m, base_url: '{url}'{extra}}}\n"


@pytest.mark.parametrize(("text", "expected"), [
    ("name: x\ndefaults: {temperature: hot}\n" + _LEVEL, "defaults.temperature"),
    ("name: x\ndefaults: {temperature: .nan}\n" + _LEVEL, "defaults.temperature"),
    ("name: x\ndefaults: {temperature: 9}\n" + _LEVEL, "defaults.temperature"),
    ("name: x\ndefaults: {max_tokens: -1}\n" + _LEVEL, "defaults.max_tokens"),
    ("name: x\ndefaults: {stop: 5}\n" + _LEVEL, "defaults.stop"),
    (_OPENAI.format(url="file:///etc/passwd", extra=""), "http:// or https://"),
    (_OPENAI.format(url="127.0.0.1:8080/v1", extra=""), "http:// or https://"),
    (_OPENAI.format(url="http://127.0.0.1:1/v1", extra=", timeout_s: .inf"), "timeout_s"),
    (_OPENAI.format(url="http://127.0.0.1:1/v1", extra=", api_key_env: 'A B'"), "api_key_env"),
    ("name: x\nlevels:\n  - {name: a, backend: embedded, model: smollm2-135m, n_threads: 100000}", "n_threads"),
    ("name: x\nlevels:\n  - {name: a, backend: embedded, model: smollm2-135m, n_ctx: 99999999}", "n_ctx"),
    ("name: x\nlevels:\n  - {name: a, backend: scripted, model: m, latency_s: .inf}", "latency_s"),
    ("name: 2024-02-30\n" + _LEVEL, "cannot read"),                       # YAML builds an impossible date
    ("name: x\nlevels:\n  - {name: a, backend: scripted, model: " + "9" * 5_000 + "}", "cannot read"),
    ("name: x\nlevels: " + "[" * 5_000 + "]" * 5_000, "pool.yaml"),                 # nests too deeply
])
def test_bad_values_in_pool_files_are_one_line_config_errors(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as err:
        load_pool(_write(tmp_path, text), cache=False)
    assert "\n" not in str(err.value) and len(str(err.value)) < 500


def test_a_pool_file_that_is_not_utf8_or_is_huge_is_refused(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("name: caf\xe9\n".encode("latin-1") + _LEVEL.encode())
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_pool(str(latin1), cache=False)
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as f:
        f.truncate(300 * 1024 * 1024)  # sparse
    with pytest.raises(ConfigError, match="larger than"):
        load_pool(str(huge), cache=False)


def test_a_corrupted_cache_file_is_one_line_offering_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "llm-cache.sqlite"
    path.write_bytes(b"\x00garbage, not SQLite" * 500)
    with pytest.raises(StorageError, match="delete or rename it") as err:
        SQLiteCache(path)
    assert "--no-cache" in str(err.value)
    with pytest.raises(StorageError, match="cannot be used"):
        load_pool("tiny", cache_path=path)


def test_an_unwritable_cache_folder_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "home"
    blocker.write_text("LEMON_HOME points at this file")
    with pytest.raises(StorageError, match="LEMON_HOME"):
        SQLiteCache(blocker / "llm-cache.sqlite")


async def test_a_cache_that_fails_to_store_still_returns_the_paid_completion(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cached = CachedBackend(ScriptedBackend("m"), SQLiteCache(path))
    other = sqlite3.connect(path)
    # Writes fail (as on a full disk), reads work.
    other.execute("CREATE TRIGGER full BEFORE INSERT ON completions BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    other.commit()
    other.close()
    completion = await cached.complete(ChatRequest((Message("user", "new question"),), REQ.params))
    assert completion.text and not completion.cached


def test_a_flipped_byte_with_its_mtime_restored_is_not_verified(tmp_path: Path) -> None:
    """The stamp trusted size + mtime: an edited file with its mtime restored still 'verified'."""
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    good = hashlib.sha256(f.read_bytes()).hexdigest()
    models.verify_sha256(f, good, "model m")  # hashed once; stamped
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[100] ^= 0xFF
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime
    with pytest.raises(ModelFileError, match="corrupted"):
        models.verify_sha256(f, good, "model m")


def test_verify_rehashes_even_behind_a_matching_stamp(tmp_path: Path) -> None:
    """`lemon models --verify` trusts no stamp: a stamp written for a bad file (a stale or forged one) does
    not make it pass."""
    f = tmp_path / "m.gguf"
    f.write_bytes(b"not the pinned model")
    pinned = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    models._write_stamp(f, pinned)
    models.verify_sha256(f, pinned, "model m")  # the stamp is trusted on the fast path
    with pytest.raises(ModelFileError, match="expected b179c9523d0e"):
        models.verify_sha256(f, pinned, "model m", rehash=True)
