"""Load a capacity pool from a built-in name (`cpu`, `tiny`, `paper-vllm`: files in `llm/pools/`) or a YAML file.

Levels that name the same model share ONE backend instance (so one llama.cpp model is loaded once and its
calls are serialised), and, unless disabled, every backend sits behind the persistent SQLite request cache.

A pool file is user input: every value is checked here, with bounds, before any backend exists, so a bad
one is a one-line `ConfigError` instead of a traceback later (`temperature: hot`, `.nan`, `timeout_s: .inf`,
a `file://` URL) or a crash inside llama.cpp (`n_threads: 100000` segfaulted).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lemon.errors import ConfigError
from lemon.files import read_regular
from lemon.llm.base import Backend, GenParams
from lemon.llm.cache import CachedBackend, CacheOnlyBackend, SQLiteCache
from lemon.llm.pool import Level, Pool
from lemon.paths import llm_cache_path
from lemon.yamlfile import load_yaml

BUILTIN = ("cpu", "tiny", "paper-vllm")
_NAME = r"^[a-z][a-z0-9_]{0,23}$"
MAX_POOL_FILE_BYTES = 1 << 20
# No CPU LEMON runs on has more cores than this; llama.cpp crashed (SIGSEGV) on 100000 threads.
MAX_THREADS = 256
MAX_CONTEXT = 1 << 17


class LevelConfig(BaseModel):
    # allow_inf_nan=False: `.nan`/`.inf` pass every ge/gt bound (NaN compares false) and mean nothing here.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(pattern=_NAME)
    backend: Literal["embedded", "openai", "scripted"]
    model: str = Field(min_length=1, max_length=4096)
    concurrency: int = Field(default=1, ge=1, le=256)
    # embedded
    n_ctx: int = Field(default=8192, ge=256, le=MAX_CONTEXT)
    n_threads: int | None = Field(default=None, ge=1, le=MAX_THREADS)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # pin for a `model:` given as a path
    # openai
    base_url: str | None = Field(default=None, max_length=2048)
    # An environment variable that, when set, replaces base_url (one pool file for many hosts).
    base_url_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    timeout_s: float = Field(default=120.0, gt=0, le=86_400)  # one attempt of a completion
    max_retries: int = Field(default=3, ge=0, le=10)
    # Connect, and answer a probe at all, within this: a silent endpoint fails in seconds, not timeout x tries.
    first_byte_s: float = Field(default=10.0, gt=0, le=3_600)
    schema_style: Literal["llama_cpp", "openai"] = "llama_cpp"
    extensions: bool = True
    # the server returns each reply's token log-probabilities (llama-server, vLLM): a logprob gate may run here
    logprobs: bool = False
    # scripted (test double)
    latency_s: float = Field(default=0.0, ge=0, le=3_600)
    hold_file: str | None = Field(default=None, max_length=4096)  # see ScriptedBackend
    hold_after_calls: int = Field(default=0, ge=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not _is_http_url(value):
            raise ValueError(f"must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8080/v1; "
                             f"got {value[:80]!r}")
        return value


def _is_http_url(value: str) -> bool:
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _with_env_url(where: str, lv: LevelConfig) -> LevelConfig:
    """`base_url_env`, when that variable is set, replaces `base_url` (checked like a URL in the file)."""
    value = os.environ.get(lv.base_url_env or "", "").strip()
    if not lv.base_url_env or not value:
        return lv
    if len(value) > 2048 or not _is_http_url(value):
        raise ConfigError(f"{where}: level {lv.name!r}: environment variable {lv.base_url_env}={value[:80]!r} is "
                          "not an http:// or https:// URL with a host, e.g. http://10.0.0.7:8001/v1")
    return lv.model_copy(update={"base_url": value})


class DefaultsConfig(BaseModel):
    """The pool's generation defaults (`GenParams`), checked: a dataclass would take `temperature: hot`."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=256, ge=1, le=MAX_CONTEXT)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    stop: tuple[str, ...] = Field(default=(), max_length=16)
    repeat_penalty: float | None = Field(default=None, gt=0.0, le=10.0)


class PoolConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64)
    defaults: DefaultsConfig = Field(default_factory=DefaultsConfig)
    levels: tuple[LevelConfig, ...] = Field(min_length=1, max_length=8)


def _read(name_or_path: str) -> tuple[str, str]:
    if name_or_path in BUILTIN:
        return f"built-in pool {name_or_path}", (resources.files("lemon.llm") / "pools" / f"{name_or_path}.yaml"
                                                  ).read_text("utf-8")
    path = Path(name_or_path).expanduser()
    if not path.exists() or path.is_dir():
        raise ConfigError(f"pool {name_or_path!r} is neither a built-in pool ({', '.join(BUILTIN)}) nor a file")
    data = read_regular(path, limit=MAX_POOL_FILE_BYTES, what="pool file", error=ConfigError,
                        size_hint="a pool is a few levels")
    try:
        return str(path), data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"pool file {path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                          "save it as UTF-8") from None


def _decode(where: str, text: str) -> PoolConfig:
    """YAML -> PoolConfig; every failure (syntax, implicit types YAML cannot build, bounds) is one line."""
    try:
        return PoolConfig.model_validate(load_yaml(text))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: malformed YAML ({' '.join(str(exc).split())[:300]})") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = " ".join(str(err["msg"]).split())[:300]
        raise ConfigError(f"{where}: field {loc}: {msg}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. `name: 2024-02-30`, a 5,000-digit int
        raise ConfigError(f"{where}: a value YAML cannot read ({' '.join(str(exc).split())[:200]}); "
                          "quote it") from None


def read_pool_config(name_or_path: str) -> PoolConfig:
    """Parse and check a pool definition without loading any model."""
    where, text = _read(name_or_path)
    cfg = _decode(where, text)
    cfg = cfg.model_copy(update={"levels": tuple(_with_env_url(where, lv) for lv in cfg.levels)})
    names = [lv.name for lv in cfg.levels]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: level names must be unique, got {names}")
    from lemon.llm.models import MODELS

    for lv in cfg.levels:
        if lv.backend == "embedded" and lv.model not in MODELS and not lv.model.endswith(".gguf"):
            raise ConfigError(f"{where}: level {lv.name!r}: unknown embedded model {lv.model!r}; use one of "
                              f"{', '.join(MODELS)} or a path ending in .gguf")
        if lv.backend == "openai" and not lv.base_url:
            env = f" and {lv.base_url_env} is not set" if lv.base_url_env else ""
            raise ConfigError(f"{where}: level {lv.name!r} uses backend openai but has no base_url{env}")
    return cfg


def pool_level_names(name_or_path: str) -> tuple[str, ...]:
    """The capacity levels of a pool, weakest first (no model is loaded)."""
    return tuple(lv.name for lv in read_pool_config(name_or_path).levels)


def _make_backend(lv: LevelConfig) -> Backend:
    if lv.backend == "embedded":
        from lemon.llm.embedded import EmbeddedBackend

        return EmbeddedBackend(lv.model, n_ctx=lv.n_ctx, n_threads=lv.n_threads, sha256=lv.sha256)
    if lv.backend == "openai":
        from lemon.llm.openai_compat import OpenAIBackend

        assert lv.base_url is not None
        return OpenAIBackend(lv.base_url, lv.model, api_key_env=lv.api_key_env, concurrency=lv.concurrency,
                             timeout_s=lv.timeout_s, max_retries=lv.max_retries, schema_style=lv.schema_style,
                             extensions=lv.extensions, first_byte_s=lv.first_byte_s, logprobs=lv.logprobs)
    from lemon.llm.scripted import ScriptedBackend

    return ScriptedBackend(lv.model, latency_s=lv.latency_s, hold_file=lv.hold_file,
                           hold_after_calls=lv.hold_after_calls)


def load_pool(name_or_path: str, *, cache: bool = True, cache_path: Path | None = None,
              offline: bool = False) -> Pool:
    """Build the pool's backends (models load lazily on first call). `offline`: answer only from the LLM cache
    (the sample bank, see `CacheOnlyBackend`); no model is loaded or called."""
    cfg = read_pool_config(name_or_path)
    if offline and not cache:
        raise ConfigError("an offline pool answers from the LLM cache: it cannot be combined with --no-cache")
    sqlite = SQLiteCache(cache_path or llm_cache_path()) if cache else None
    shared: dict[tuple[Any, ...], Backend] = {}
    levels: list[Level] = []
    for lv in cfg.levels:
        key = (lv.backend, lv.model, lv.base_url, lv.n_ctx, lv.n_threads, lv.latency_s, lv.hold_file)
        if key not in shared:
            backend = _make_backend(lv)
            if offline:
                backend = CacheOnlyBackend(backend.model_id)
            shared[key] = CachedBackend(backend, sqlite) if sqlite is not None else backend
        # An embedded model runs one call at a time however many levels share it.
        concurrency = 1 if lv.backend == "embedded" else lv.concurrency
        levels.append(Level(lv.name, shared[key], concurrency))
    return Pool(cfg.name, tuple(levels), GenParams(**cfg.defaults.model_dump()), ref=str(name_or_path),
                cache=sqlite, offline=offline)
