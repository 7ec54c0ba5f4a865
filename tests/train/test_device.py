"""The trainer runs where the policy lives: CPU here, CUDA on a GPU machine (`policy_device()` picks it).

A tiny random Llama stands in for the policy (no weights to download); the same file runs on a GPU box as the
check that nothing in the update path is pinned to the CPU."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.train
import torch  # noqa: E402  (the test command installs the train extra: a missing torch fails, never skips)
import transformers  # noqa: E402

from lemon.train.batch import StepBatch  # noqa: E402
from lemon.train.config import load_train_config  # noqa: E402
from lemon.train.credit import CounterfactualTerm  # noqa: E402
from lemon.train.generation import batch_logprobs, model_device  # noqa: E402
from lemon.train.policy import policy_device  # noqa: E402
from lemon.train.update import policy_update  # noqa: E402


def _tiny_policy() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    return transformers.LlamaForCausalLM(config).to(policy_device())


def test_logprobs_and_one_update_on_the_policy_device(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _tiny_policy()
    device = model_device(model)
    assert device.type == torch.device(policy_device()).type
    prompts, completions = [[5, 6, 7], [8, 9]], [[10, 11, 12, 13], [14, 15]]
    lp, mask, prompt_len = batch_logprobs(model, prompts, completions, pad_id=0)
    assert lp.device == device and lp.shape == (2, 4) and prompt_len == 3
    assert mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]] and bool(torch.isfinite(lp).all())
    before = [p.detach().clone() for p in model.parameters()]
    batch = StepBatch(prompts=prompts, completions=completions, advantages=[1.0, -1.0],
                      cf_terms=[[CounterfactualTerm(token_indices=(1, 2), delta=0.5)], []])
    cfg = load_train_config()
    stats = policy_update(model, batch, torch.optim.AdamW(model.parameters(), lr=1e-2), cfg, pad_id=0)
    assert stats["updated"] == 1.0 and stats["grad_norm"] > 0 and stats["loss_cf"] != 0.0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_the_device_can_be_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEMON_TRAIN_DEVICE", "cpu")
    assert policy_device() == "cpu"
    monkeypatch.delenv("LEMON_TRAIN_DEVICE")
    assert policy_device() == ("cuda" if torch.cuda.is_available() else "cpu")
