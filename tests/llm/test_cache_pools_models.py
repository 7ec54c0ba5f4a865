"""The persistent LLM cache, pool configuration errors, and model-file verification (no model needed)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lemon.errors import ConfigError, ModelFileError
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
