"""The default policy: packaged GGUF located and verified, converted once, cached, loadable (+ LoRA)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lemon.errors import ModelFileError
from lemon.train import policy as pol


def test_default_policy_dir_lives_with_the_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LEMON_MODELS_DIR", raising=False)
    monkeypatch.setenv("LEMON_HOME", str(tmp_path))
    assert pol.default_policy_dir() == tmp_path / "models" / "policies" / "smollm2-135m-instruct-hf"
    monkeypatch.setenv("LEMON_MODELS_DIR", str(tmp_path / "m"))
    assert pol.default_policy_dir() == tmp_path / "m" / "policies" / "smollm2-135m-instruct-hf"


def _complete(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / pol.MARKER).write_text(json.dumps({"source_sha256": pol.GGUF_SHA256,
                                            "conversion_version": pol.CONVERSION_VERSION}))
    return d


def test_install_dir_is_atomic_and_keeps_a_finished_cache(tmp_path: Path) -> None:
    target = tmp_path / "policy"
    new = _complete(tmp_path / ".tmp1")
    (new / "w").write_text("new")
    pol._install_dir(new, target)
    assert (target / "w").read_text() == "new" and not new.exists()
    assert pol._cache_is_complete(target)
    # A concurrent conversion that finishes second leaves the first one in place.
    late = _complete(tmp_path / ".tmp2")
    (late / "w").write_text("late")
    pol._install_dir(late, target)
    assert (target / "w").read_text() == "new"
    # A stale or partial directory (no marker) is replaced.
    (target / pol.MARKER).unlink()
    fresh = _complete(tmp_path / ".tmp3")
    (fresh / "w").write_text("fresh")
    pol._install_dir(fresh, target)
    assert (target / "w").read_text() == "fresh"


@pytest.mark.train
def test_packaged_gguf_is_located_and_verified_by_the_model_registry() -> None:
    path = pol.default_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size == 98_362_432


@pytest.mark.train
def test_default_policy_is_cached_and_loads(policy_dir: Path) -> None:
    assert policy_dir == pol.default_policy_dir()
    assert (policy_dir / "model.safetensors").is_file() and pol._cache_is_complete(policy_dir)
    weights = policy_dir / "model.safetensors"
    written = weights.stat().st_mtime_ns
    assert pol.ensure_default_policy() == policy_dir
    assert weights.stat().st_mtime_ns == written  # cached: no second conversion rewrote the weights
    model, tok = pol.load_policy()
    assert tok.is_fast and tok.pad_token is not None and model.config.pad_token_id == tok.pad_token_id
    assert "<|im_start|>" in tok.chat_template
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert not getattr(model, "hf_quantizer", None) and model.dtype.is_floating_point


@pytest.mark.train
def test_lora_wraps_only_adapters(policy_dir: Path) -> None:
    from lemon.train.config import LoraSettings

    model, _ = pol.load_policy(str(policy_dir), lora=LoraSettings(r=2, alpha=4))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    assert 0 < trainable < total // 100


def test_unknown_local_path_is_a_model_file_error(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError):
        pol.load_policy(str(tmp_path / "nope"))


def test_qwen_policy_converts_from_its_pinned_gguf_and_takes_lora() -> None:
    """Issue 10: a Qwen2.5-0.5B + LoRA policy beside SmolLM2, from the GGUF the cpu pool already installs."""
    import torch

    from lemon.train.config import LoraSettings
    from lemon.train.generation import chat_prompt_ids, generate

    model, tok = pol.load_policy("qwen2.5-coder-0.5b", lora=LoraSettings())
    assert pol.default_policy_dir("qwen2.5-coder-0.5b").name == "qwen2.5-coder-0.5b-instruct-hf"
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    prompt = chat_prompt_ids(tok, [{"role": "user", "content": "Say OK."}])
    (comp,) = generate(model, tok, [prompt], max_new_tokens=4, temperature=0.0)
    assert comp.ids and isinstance(comp.text, str)
    assert model.config.model_type == "qwen2" and next(model.parameters()).dtype == torch.float32
