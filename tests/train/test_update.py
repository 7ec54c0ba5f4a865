"""The credit and update phases: one scale for both advantage terms, no step without signal, eval-mode
loss, the LoRA reference without a second model copy, and inference stopping as training does."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.train
import torch  # noqa: E402  (the [train] extra is part of the test install)

from lemon.spec.render import FieldRef  # noqa: E402
from lemon.train.batch import StepBatch, build_batch  # noqa: E402
from lemon.train.config import CreditConfig, TrainConfig  # noqa: E402
from lemon.train.credit import counterfactual_advantages  # noqa: E402
from lemon.train.generation import Completion  # noqa: E402
from lemon.train.policy_handle import Reference  # noqa: E402
from lemon.train.reward import RewardBreakdown  # noqa: E402
from lemon.train.rollout import Counterfactual, GroupResult, Sample  # noqa: E402
from lemon.train.simulate import SlotPolicy  # noqa: E402
from lemon.train.update import policy_update  # noqa: E402


def _sample(total: float, cf: Counterfactual | None = None) -> Sample:
    s = Sample(completion="x" * 20, valid=True, canonical_at=0, cf=cf)
    s.reward = RewardBreakdown(total, max(total, 0.0), 0.0, 0.0, 0.0, True)
    return s


@pytest.mark.parametrize("mode", ["none", "batch_std", "group_std"])
def test_counterfactual_and_group_advantage_share_one_scale(mode: str) -> None:
    """Review item 2: a delta of one flipped success weighs what one solved spec weighs in its group."""
    cf = Counterfactual("capacity", FieldRef("capacity", "a"), 3, 4, delta=1.0, edited_reward=0.0,
                        spent_tokens=1, estimated_tokens=1, cache_hits=0, calls=1)
    group = GroupResult("t", [_sample(1.0, cf), _sample(0.0), _sample(0.0), _sample(0.0)])
    comp = Completion([1], list(range(20)), "x" * 20, [(i, i + 1) for i in range(20)], stopped=True)
    batch = build_batch([group], [[comp] * 4], CreditConfig(cf_weight=1.0, advantage_scale=mode))  # type: ignore[arg-type]
    gap = batch.advantages[0] - batch.advantages[1]  # what solving the task is worth in this group
    (term,) = batch.cf_terms[0]
    span_total = float(counterfactual_advantages(20, [term]).sum())
    assert span_total == pytest.approx(gap)


def _cfg(**credit: Any) -> TrainConfig:
    return TrainConfig.model_validate({"credit": {"kl_beta": 0.04, **credit}, "optim": {"lr": 0.1}})


def _batch(policy: SlotPolicy, advantage: float) -> StepBatch:
    (comp,) = policy.sample([[0]], max_new_tokens=32, temperature=1.0, seed=0)
    return StepBatch([comp.prompt_ids], [comp.ids], [advantage], [[]])


def test_no_step_on_a_batch_without_signal_even_with_kl() -> None:
    """Review item 7: Adam's momentum must not keep moving the policy on all-zero batches."""
    policy = SlotPolicy.create()
    opt = torch.optim.Adam(policy.model.parameters(), lr=0.1)
    ref = Reference(policy.model, copy.deepcopy(policy.model))
    cfg = _cfg()
    assert policy_update(policy.model, _batch(policy, 1.0), opt, cfg, 0, ref)["updated"] == 1.0
    before = policy.model.theta.detach().clone()
    stats = policy_update(policy.model, _batch(policy, 0.0), opt, cfg, 0, ref)
    assert stats["updated"] == 0.0
    assert torch.equal(policy.model.theta.detach(), before)


def test_update_reports_weight_change_and_entropy() -> None:
    policy = SlotPolicy.create()
    opt = torch.optim.Adam(policy.model.parameters(), lr=0.1)
    stats = policy_update(policy.model, _batch(policy, 1.0), opt, _cfg(kl_beta=0.0), 0)
    assert stats["weight_change"] > 0 and stats["entropy"] > 0


def test_loss_is_computed_in_eval_mode() -> None:
    """Review item 6: generation runs without dropout, so the scored forward must too."""
    policy = SlotPolicy.create()
    seen: list[bool] = []
    policy.model.register_forward_pre_hook(lambda mod, args: seen.append(mod.training))
    policy.model.train()
    policy_update(policy.model, _batch(policy, 1.0), torch.optim.SGD(policy.model.parameters(), lr=0.1),
                  _cfg(kl_beta=0.0), 0)
    assert seen == [False]
    assert policy.model.training  # restored


def test_lora_reference_is_the_base_model_with_the_adapter_off(policy_dir: Path, tmp_path: Path) -> None:
    """Review item 7: no second full model copy for the KL reference of a LoRA policy."""
    from lemon.train.generation import batch_logprobs
    from lemon.train.grpo import _load_policy
    from lemon.train.policy import load_policy
    from lemon.train.settings import TrainSettings

    cfg = TrainConfig()
    handle, ref = _load_policy(TrainSettings(run_dir=tmp_path, policy=str(policy_dir), lora=True), cfg, None)
    assert ref is not None and ref.frozen is None
    with torch.no_grad():
        for name, p in handle.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    prompts, comps = [[1, 2, 3, 4]], [[5, 6, 7]]
    base, _ = load_policy(str(policy_dir))
    expect = batch_logprobs(base.eval(), prompts, comps, handle.pad_id)[0]
    got = ref.logprobs(prompts, comps, handle.pad_id, 1.0)
    assert torch.allclose(got, expect, atol=1e-5)
    trained = batch_logprobs(handle.model.eval(), prompts, comps, handle.pad_id)[0]
    assert not torch.allclose(trained, expect, atol=1e-5)


def test_inference_stops_and_budgets_as_training_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review item 7: the trained orchestrator uses training's stop tokens and completion budget."""
    from lemon.llm.hf import HFChatGenerator
    from lemon.orchestrator.trained import DEFAULT_MAX_NEW_TOKENS
    from lemon.train.generation import eos_ids

    assert TrainConfig().rollout.max_new_tokens == DEFAULT_MAX_NEW_TOKENS
    seen: dict[str, Any] = {}

    class Tok:
        pad_token_id, eos_token_id, pad_token = 0, 2, "<pad>"

        def apply_chat_template(self, *a: Any, **k: Any) -> str:
            return "prompt"

        def __call__(self, *a: Any, **k: Any) -> dict[str, Any]:
            return {"input_ids": torch.tensor([[1, 1]])}

        def decode(self, ids: Any, **k: Any) -> str:
            return "agents: []"

    class Model:
        generation_config = type("G", (), {"eos_token_id": [2, 7]})()

        def generate(self, **kwargs: Any) -> Any:
            seen.update(kwargs)
            return torch.tensor([[1, 1, 9, 7]])

    gen = HFChatGenerator(Path("unused"))
    monkeypatch.setattr(gen, "_load", lambda: (Model(), Tok()))
    gen.generate([{"role": "user", "content": "t"}], 16, 0.0, 0)
    assert set(seen["eos_token_id"]) == eos_ids(Model(), Tok()) == {2, 7}


def _epochs_cfg(epochs: int) -> TrainConfig:
    return TrainConfig.model_validate({"credit": {"kl_beta": 0.0, "clip_eps": 0.2},
                                       "optim": {"lr": 1.0, "epochs": epochs, "max_grad_norm": 1e9}})


@pytest.mark.parametrize("lr", [0.05, 50.0])
def test_later_epochs_score_the_clipped_ratio_to_the_sampling_policy(lr: float) -> None:
    """Epoch 2 = PPO's clipped surrogate against epoch 1's log-probs: a first step that moved the sampled
    tokens' probability past 1 + eps leaves nothing to learn (no move); a small one is taken again."""
    policy = SlotPolicy.create()
    batch = _batch(policy, 1.0)
    one, two = copy.deepcopy(policy.model), copy.deepcopy(policy.model)
    policy_update(one, batch, torch.optim.SGD(one.parameters(), lr=lr), _epochs_cfg(1), 0)
    stats = policy_update(two, batch, torch.optim.SGD(two.parameters(), lr=lr), _epochs_cfg(2), 0)
    moved_again = float((two.theta - one.theta).detach().abs().max())
    if lr > 1:  # every sampled token's ratio is far above 1.2 after the first step: clipped, zero gradient
        assert moved_again == 0.0
    else:  # ratio inside the clip range: the second step is the ratio-weighted policy gradient, same sign
        step1 = (one.theta - policy.model.theta).detach()
        step2 = (two.theta - one.theta).detach()
        assert moved_again > 0 and float((step1 * step2).sum()) > 0
    assert stats["updated"] == 1.0


def _tiny_lora_llama() -> torch.nn.Module:
    """A tiny random Llama with a LoRA adapter whose dropout is 0.5 (so dropout left on would show)."""
    import transformers
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    model = get_peft_model(transformers.LlamaForCausalLM(config), LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.5, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():  # a non-zero adapter, so its dropout changes the output
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    return model.train()


def test_gradient_checkpointing_recomputes_and_changes_nothing_else() -> None:
    """Checkpointing runs only in training mode in transformers: the update must still score without dropout
    (LoRA's included) and take the same step; the layer's forward runs again in backward (the memory saving)."""
    from lemon.train.grpo import enable_checkpointing

    batch = StepBatch([[1, 2, 3], [4, 5]], [[6, 7, 8, 9], [10, 11]], [1.0, -0.5], [[], []])
    results = []
    for checkpointing in (False, True):
        model = _tiny_lora_llama()
        attn = model.base_model.model.model.layers[0].self_attn
        seen: list[tuple[bool, bool]] = []
        attn.register_forward_pre_hook(lambda mod, args, m=model, seen=seen: seen.append(
            (mod.training, any(d.training for d in m.modules() if isinstance(d, torch.nn.Dropout)))))
        if checkpointing:
            enable_checkpointing(model)
        cfg = TrainConfig.model_validate({"credit": {"kl_beta": 0.0},
                                          "optim": {"lr": 0.5, "gradient_checkpointing": checkpointing,
                                                    "share_prompt": False}})
        policy_update(model, batch, torch.optim.SGD(model.parameters(), lr=0.5), cfg, 0)
        results.append([p.detach().clone() for p in model.parameters()])
        assert len(seen) == (2 if checkpointing else 1)  # recomputed in backward
        assert seen[0] == (checkpointing, False)  # training mode only with checkpointing; dropout never on
        assert model.training  # restored
    assert max(float((a - b).abs().max()) for a, b in zip(*results, strict=True)) < 1e-6


def _plain_llama() -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    return transformers.LlamaForCausalLM(config).eval()


def test_a_shared_prompt_is_scored_once_with_the_same_logprobs_and_gradients() -> None:
    """A group's prompt runs once and its completions reuse the prompt's key/value cache: same numbers."""
    from lemon.train.generation import batch_logprobs, shared_prompt_logprobs

    prompt, comps = [5, 6, 7, 8, 9, 10, 11], [[12, 13, 14, 15], [16, 17], [18, 19, 20, 21, 22], [23]]
    results = []
    for shared in (False, True):
        model = _plain_llama()
        if shared:
            lp, mask, _ = shared_prompt_logprobs(model, prompt, comps, 0)
        else:
            lp, mask, _ = batch_logprobs(model, [prompt] * 4, comps, 0)
        (lp * mask).sum().backward()
        results.append((lp.detach() * mask, [p.grad.clone() for p in model.parameters()]))
    (lp0, g0), (lp1, g1) = results
    assert torch.allclose(lp0, lp1, atol=1e-5)
    assert max(float((a - b).abs().max()) for a, b in zip(g0, g1, strict=True)) < 1e-5


def test_micro_batches_are_cut_at_group_boundaries_when_prompts_are_shared() -> None:
    from lemon.train.microbatch import micro_batches

    prompts = [[1]] * 4 + [[2]] * 4 + [[3]] * 2
    assert micro_batches(prompts, 4, by_prompt=True) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert micro_batches(prompts, 3, by_prompt=True) == [slice(0, 3), slice(3, 4), slice(4, 7), slice(7, 8),
                                                         slice(8, 10)]
    assert micro_batches(prompts, 4, by_prompt=False) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert micro_batches(prompts, 8, by_prompt=False) == [slice(0, 8), slice(8, 10)]


def test_an_update_with_shared_prompts_equals_one_without() -> None:
    """Two groups with a KL reference: the same step whether each group's prompt runs once or per row."""
    batch = StepBatch([[1, 2, 3]] * 3 + [[4, 5]] * 3, [[6, 7, 8, 9], [10, 11], [12], [13, 14], [15, 16, 17], [18]],
                      [1.0, -0.5, -0.5, 0.2, 0.3, -0.5], [[], [], [], [], [], []])
    results = []
    for share in (False, True):
        model = _plain_llama()
        ref = Reference(model, copy.deepcopy(model).requires_grad_(False))
        cfg = TrainConfig.model_validate({"credit": {"kl_beta": 0.1}, "optim": {"lr": 0.5, "epochs": 2,
                                                                                  "share_prompt": share}})
        policy_update(model, batch, torch.optim.SGD(model.parameters(), lr=0.5), cfg, 0, ref)
        results.append([p.detach().clone() for p in model.parameters()])
    assert max(float((a - b).abs().max()) for a, b in zip(*results, strict=True)) < 1e-5


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_with_a_shared_prefill_samples_what_it_samples_without(temperature: float) -> None:
    """A group's prompt is prefilled once and its cache repeated: the same completions, greedy or seeded."""
    from types import SimpleNamespace

    from lemon.train.generation import generate, shared_prefill

    model = _plain_llama()
    tok = SimpleNamespace(pad_token_id=0, eos_token_id=63, decode=lambda ids, **k: "".join(chr(65 + i % 26)
                                                                                          for i in ids))
    prompts = [[5, 6, 7, 8]] * 3 + [[9, 10]] * 3
    assert shared_prefill(model, prompts, 0) is not None
    assert shared_prefill(model, prompts[:1] + prompts[3:4], 0) is None  # no prompt repeats
    widths: list[int] = []
    model.model.register_forward_pre_hook(lambda mod, args, kw: widths.append(kw["input_ids"].shape[1]),
                                          with_kwargs=True)
    runs, first = [], []
    for share in (False, True):
        widths.clear()
        runs.append([c.ids for c in generate(model, tok, prompts, max_new_tokens=6, temperature=temperature,
                                             seed=3, share_prompt=share)])
        first.append(widths[:2])
    assert runs[0] == runs[1] and all(len(r) >= 1 for r in runs[0])
    assert first == [[4, 1], [3, 1]]  # unshared: 6 rows x 4; shared: 2 distinct prompts x 3, then 1 token


def test_update_reports_the_probability_of_the_credited_tokens() -> None:
    """The counterfactual gradient on a token is A * (onehot - p): `cf_span_p` says how much room the credited
    tokens still had (issue 10's CPU run: ~0.9999 after two steps, so Δ = 1.09 moved nothing)."""
    from lemon.train.credit import CounterfactualTerm
    from lemon.train.generation import score_completions

    policy = SlotPolicy.create()
    (comp,) = policy.sample([[0]], max_new_tokens=32, temperature=1.0, seed=0)
    with torch.no_grad():
        lp, _, _ = score_completions(policy.model, [comp.prompt_ids], [comp.ids], 0)
    span = [i for i in range(len(comp.ids)) if float(lp[0, i]) < -1e-3][:2]  # two tokens the policy chose
    expected = float(torch.exp(lp[0, span]).mean())
    batch = StepBatch([comp.prompt_ids], [comp.ids], [0.5], [[CounterfactualTerm(span, delta=1.0)]])
    stats = policy_update(policy.model, batch, torch.optim.SGD(policy.model.parameters(), lr=0.1),
                          _cfg(kl_beta=0.0), 0)
    assert stats["cf_span_tokens"] == 2 and stats["cf_span_p"] == pytest.approx(expected, rel=1e-5)
    assert 0 < expected < 1
    plain = policy_update(policy.model, _batch(policy, 1.0), torch.optim.SGD(policy.model.parameters(), lr=0.1),
                          _cfg(kl_beta=0.0), 0)
    assert plain["cf_span_tokens"] == 0 and "cf_span_p" not in plain


def test_checkpointing_with_lora_and_kl_never_shares_prompts_over_several_micro_batches() -> None:
    """Issue 25: the prompt-sharing flag was reused as the micro-batch's token weight (a float), so from the
    second micro-batch shared-prompt scoring came back on under gradient checkpointing, where transformers
    drops the key/value cache (AttributeError ... batch_repeat_interleave). 3 micro-batches, LoRA, KL: the
    step must run and equal the step taken without checkpointing."""
    from lemon.train.grpo import enable_checkpointing

    batch = StepBatch([[1, 2, 3]] * 2 + [[4, 5]] * 2 + [[6, 7, 8]] * 2,
                      [[9, 10, 11], [12], [13, 14], [15, 16, 17], [18, 19], [20]],
                      [1.0, -0.5, 0.3, -0.3, 0.8, -0.8], [[]] * 6)
    results = []
    for checkpointing in (False, True):
        model = _tiny_lora_llama()
        if checkpointing:
            enable_checkpointing(model)
        cfg = TrainConfig.model_validate({"credit": {"kl_beta": 0.1}, "optim": {
            "lr": 0.5, "micro_batch": 2, "gradient_checkpointing": checkpointing, "share_prompt": True}})
        stats = policy_update(model, batch, torch.optim.SGD(model.parameters(), lr=0.5), cfg, 0,
                              Reference(model, None))
        assert stats["updated"] == 1.0 and stats["kl"] >= 0.0
        results.append([p.detach().clone() for p in model.parameters()])
    assert max(float((a - b).abs().max()) for a, b in zip(*results, strict=True)) < 1e-5


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_ignores_the_models_own_generation_config(temperature: float) -> None:
    """Issue 25: a checkpoint's generation_config (here repetition_penalty and no_repeat_ngram_size) filled in
    whatever `generate` was not given, so the policy sampled from another distribution than the loss scores
    (softmax(z / T) of the raw logits). Same completions as the model without one, greedy and seeded; the
    config itself is left as it was."""
    from types import SimpleNamespace

    from lemon.train.generation import generate

    tok = SimpleNamespace(pad_token_id=0, eos_token_id=63, decode=lambda ids, **k: "".join(chr(65 + i % 26)
                                                                                          for i in ids))
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    runs = []
    for penalised in (False, True):
        model = _plain_llama()
        if penalised:
            model.generation_config.repetition_penalty = 8.0
            model.generation_config.no_repeat_ngram_size = 1
        runs.append([c.ids for c in generate(model, tok, prompts, max_new_tokens=16, temperature=temperature,
                                             seed=3)])
        if penalised:
            assert model.generation_config.repetition_penalty == 8.0
    assert runs[0] == runs[1]
    assert any(len(set(r)) < len(r) for r in runs[0])  # the plain samples repeat tokens: the penalty would bite


def test_the_update_copies_a_bounded_sample_of_the_weights_not_all_of_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25: every step copied ALL trainable weights to report how far they moved (a second copy of a full
    fine-tune's weights). Now a strided sample of at most `WATCHED_ELEMENTS` is copied, and its relative
    change tracks the exact one."""
    from torch.overrides import TorchFunctionMode

    from lemon.train import update as grpo

    class CountClones(TorchFunctionMode):
        copied = 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.Tensor.clone and args[0].is_floating_point():
                CountClones.copied += args[0].numel()
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(grpo, "WATCHED_ELEMENTS", 2000, raising=False)
    batch = StepBatch([[1, 2, 3]] * 2, [[6, 7, 8, 9], [10, 11]], [1.0, -1.0], [[], []])
    model = _plain_llama()
    start = [p.detach().clone() for p in model.parameters()]
    n = sum(p.numel() for p in start)
    cfg = TrainConfig.model_validate({"credit": {"kl_beta": 0.0}, "optim": {"lr": 0.05}})
    with CountClones():
        stats = policy_update(model, batch, torch.optim.AdamW(model.parameters(), lr=0.05), cfg, 0)
    assert n > 10 * 2000 and CountClones.copied <= 2000 + len(start)
    exact = math.sqrt(sum(float((p.detach() - s).square().sum()) for p, s in zip(model.parameters(), start,
                                                                                 strict=True)))
    exact /= math.sqrt(sum(float(s.square().sum()) for s in start))
    assert stats["weight_change"] == pytest.approx(exact, rel=0.2)


def _certain_span_batch(policy: SlotPolicy, logit: float) -> StepBatch:
    """A batch whose only signal is a counterfactual Δ on two tokens the policy writes with logit `logit`
    above the alternatives (p ~ 1 for a large one)."""
    from lemon.train.credit import CounterfactualTerm

    (comp,) = policy.sample([[0]], max_new_tokens=32, temperature=1.0, seed=0)
    with torch.no_grad():
        chosen = [k for k, row in enumerate(policy.model.mask) if int((row == 0).sum()) > 1][:2]  # slots with a choice
        for k in chosen:
            policy.model.theta[k, comp.ids[k]] = logit
    return StepBatch([comp.prompt_ids], [comp.ids], [0.0], [[CounterfactualTerm(chosen, delta=1.0)]])


@pytest.mark.parametrize(("logit", "steps"), [(10.0, False), (0.0, True)])
def test_a_gradient_below_the_floor_takes_no_optimiser_step(logit: float, steps: bool) -> None:
    """Issue 24's confound: a Δ on a span written with p ~ 1 counts as signal, yet its gradient is ~0, and
    Adam turned each such batch into a full-size step. Below `optim.min_grad_norm` nothing moves; a span with
    room (p ~ 1/choices) still steps."""
    policy = SlotPolicy.create()
    batch = _certain_span_batch(policy, logit)
    before = policy.model.theta.detach().clone()
    opt = torch.optim.Adam(policy.model.parameters(), lr=0.1)
    stats = policy_update(policy.model, batch, opt, _cfg(kl_beta=0.0), 0)
    moved = not torch.equal(policy.model.theta.detach(), before)
    assert batch.has_signal() and stats["grad_norm"] > 0
    assert (stats["updated"] == 1.0) is steps and moved is steps
    assert (stats["grad_norm"] >= TrainConfig().optim.min_grad_norm) is steps


@pytest.mark.parametrize(("logit", "steps"), [(0.01, False), (0.0, True)])
def test_the_signal_floor_holds_whatever_lies_behind_the_logits(logit: float, steps: bool) -> None:
    """The six-benchmark table's GRPO (2026-11-27): on a full fine-tune, batches with no signal had gradient
    norms of 1.9e-3 and 8.4e-3, above the floor measured on LoRA, and their Adam steps broke the policy's YAML.
    Here the same logits come from weights scaled 1000x (a stand-in for another parameterisation): a certain
    span's gradient norm is far above `min_grad_norm`, yet its push on the logits is ~0, so it takes no step;
    a span with room still steps."""
    policy = SlotPolicy.create()
    model = policy.model
    model.slot_logits = lambda: 1000.0 * model.theta + model.mask  # type: ignore[method-assign]
    batch = _certain_span_batch(policy, logit)  # logit 0.01 -> 10 in logit space, as the test above
    before = model.theta.detach().clone()
    stats = policy_update(model, batch, torch.optim.Adam(model.parameters(), lr=0.1), _cfg(kl_beta=0.0), 0)
    optim = TrainConfig().optim
    assert stats["grad_norm"] > optim.min_grad_norm  # the gradient-norm floor alone would step (4.9e-3)
    assert (stats["signal"] >= optim.min_signal) is steps
    assert (stats["updated"] == 1.0) is steps and (not torch.equal(model.theta.detach(), before)) is steps


def test_without_the_floor_adam_moves_a_full_step_on_a_vanishing_gradient() -> None:
    """Why the floors exist: the same certain-span batch, both floors off, moves a weight by ~lr (Adam's first step
    is lr * sign(g) while |g| >> eps) though its gradient is ~1e-4."""
    policy = SlotPolicy.create()
    batch = _certain_span_batch(policy, 10.0)
    before = policy.model.theta.detach().clone()
    cfg = TrainConfig.model_validate({"credit": {"kl_beta": 0.0},
                                      "optim": {"lr": 0.1, "min_grad_norm": 0.0, "min_signal": 0.0}})
    stats = policy_update(policy.model, batch, torch.optim.Adam(policy.model.parameters(), lr=0.1), cfg, 0)
    assert stats["updated"] == 1.0 and stats["grad_norm"] < 1e-3
    assert float((policy.model.theta.detach() - before).abs().max()) == pytest.approx(0.1, rel=0.01)
