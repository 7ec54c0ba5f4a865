"""Decoding the policy under the spec grammar (issue 55, point 2), on the real SmolLM2 policy, UNTRAINED: its
free samples are prose, its constrained ones are specs; and the policy-gradient math stays right: the log-probs
the loss scores are those of the distribution actually sampled from (masked and renormalised)."""

from __future__ import annotations

from typing import Any

import pytest

from lemon.orchestrator.policy_prompt import policy_messages
from lemon.orchestrator.repair import extract_object_text, spec_from_output
from lemon.spec.parse import parse_spec
from lemon.spec.roles import RoleLibrary
from tests.spec_strategies import LEVELS

pytestmark = pytest.mark.train

ROLES = RoleLibrary.load()
TASK = "A shop sells 17 boxes of 23 pencils. How many pencils is that?"


def _prompt(tokenizer: Any) -> list[int]:
    from lemon.train.generation import chat_prompt_ids

    return chat_prompt_ids(tokenizer, policy_messages(TASK, ROLES, LEVELS, "terse"))


def _small_decoding(model: Any, tokenizer: Any) -> Any:
    """The spec grammar with small bounds (one agent block, a 20-character duty), so that every sample below
    ends within its token budget (a cut spec is a prefix of one, not a spec)."""
    from lemon.llm.constrained import SpecDecoding
    from lemon.llm.hf import stop_token_ids
    from lemon.spec.grammar import spec_grammar

    lark = spec_grammar(ROLES, LEVELS, max_agents=1, max_duty_len=20).lark()
    return SpecDecoding(tokenizer, lark, model.config.vocab_size, stop_token_ids(model, tokenizer))


def test_untrained_samples_parse_under_the_grammar_and_not_without(policy: tuple[Any, Any]) -> None:
    from lemon.train.generation import generate

    model, tok = policy
    prompt = _prompt(tok)
    free = generate(model, tok, [prompt] * 4, max_new_tokens=40, temperature=1.0, seed=3, share_prompt=True)
    assert all(spec_from_output(c.text, TASK, ROLES, LEVELS)[1] == "fallback" for c in free), [c.text for c in free]
    decoding = _small_decoding(model, tok)
    bound = generate(model, tok, [prompt] * 8, max_new_tokens=160, temperature=1.0, seed=3, share_prompt=True,
                     decoding=decoding)
    sources = [spec_from_output(c.text, TASK, ROLES, LEVELS)[1] for c in bound]
    for c in bound:
        assert c.stopped and decoding.accepts(c.ids), c.text
        parse_spec(extract_object_text(c.text))  # every one parses as written
    # What the grammar cannot say (which parents exist) is still validation's: an untrained policy names parents
    # at random, so repair is common and a fallback possible; a trained one writes its own agents' names.
    assert sources.count("fallback") < len(sources), sources


def test_the_loss_scores_the_distribution_that_sampled(policy: tuple[Any, Any]) -> None:
    """The sampler's own (processed) scores at each step, log-softmaxed, equal the scorer's masked log-probs of
    the sampled tokens; a token the grammar forbids has probability zero in both; unmasked scoring differs."""
    import torch

    from lemon.llm.hf import neutral_generation_config, stop_token_ids
    from lemon.train.generation import batch_logprobs

    model, tok = policy
    decoding = _small_decoding(model, tok)
    prompt = _prompt(tok)
    torch.manual_seed(5)
    with torch.no_grad(), neutral_generation_config(model):
        out = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt)),
                             max_new_tokens=12, do_sample=True, temperature=0.7, top_k=0, top_p=1.0,
                             logits_processor=[decoding.processor(1)], return_dict_in_generate=True,
                             output_scores=True, pad_token_id=tok.pad_token_id,
                             eos_token_id=sorted(stop_token_ids(model, tok)))
    ids = out.sequences[0, len(prompt):].tolist()
    sampled = torch.log_softmax(torch.stack(out.scores, 1)[0].float(), -1)  # [T, V], what the sampler drew from
    forbidden = tok("{", add_special_tokens=False)["input_ids"][0]  # the text must start with `agents:`
    assert sampled[0, forbidden] == float("-inf")
    masks = decoding.masks([ids], len(ids))
    with torch.no_grad():
        lp, _, _ = batch_logprobs(model, [prompt], [ids], tok.pad_token_id, 0.7, masks=masks)
        free, _, _ = batch_logprobs(model, [prompt], [ids], tok.pad_token_id, 0.7)
    want = sampled.gather(1, torch.tensor(ids)[:, None])[:, 0]
    assert torch.allclose(lp[0], want, atol=1e-4), (lp[0], want)
    assert not torch.allclose(free[0], want, atol=1e-3)  # the unmasked softmax is not what sampled them
    from lemon.train.credit import token_logprobs

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits
        alt = torch.full((1, len(ids)), forbidden)
        both = token_logprobs(logits, torch.tensor([ids]), len(prompt), 0.7, alt,
                              allowed=_unpacked(masks, logits))
    assert both[0, 0, 1] == float("-inf")  # the forbidden token, scored: probability zero


def _unpacked(masks: Any, logits: Any) -> Any:
    from lemon.llm.constrained import unpack

    return unpack(masks, logits.shape[-1])


@pytest.mark.models
async def test_an_exported_policy_decodes_under_the_gbnf_grammar() -> None:
    """The .gguf path (`lemon export-gguf`'s output is a GGUF; the packaged SmolLM2 one stands in for it): under
    the GBNF grammar every sample parses; unconstrained (`unconstrained:PATH`), the untrained model's do not."""
    from lemon.llm.models import ensure_model
    from lemon.orchestrator.trained import TrainedOrchestrator

    gguf = ensure_model("smollm2-135m")
    for grammar in (True, False):
        orch = TrainedOrchestrator(gguf, ROLES, LEVELS, temperature=1.0, grammar=grammar, max_new_tokens=200)
        try:
            proposals = [await orch.propose(TASK, seed=s) for s in range(4)]
        finally:
            await orch.aclose()
        sources = [p.source for p in proposals]
        if grammar:
            assert all(p.extra["grammar"] for p in proposals)
            for p in proposals:
                parse_spec(extract_object_text(p.raw))
            assert "fallback" not in sources, [p.raw for p in proposals]
        else:
            assert sources.count("fallback") >= 3, [p.raw for p in proposals]


def test_unpacked_masks_name_exactly_the_allowed_tokens() -> None:
    """Bit j of word w is token 32 w + j, as llguidance packs them (checked token by token, sign bit included)."""
    import itertools

    import torch

    from lemon.llm.constrained import unpack

    bits = torch.randint(-2**31, 2**31 - 1, (2, 3, 5), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    out = unpack(bits, 150)
    assert out.shape == (2, 3, 150)
    for b, t, tok in itertools.product(range(2), range(3), range(150)):
        word = int(bits[b, t, tok // 32]) & 0xFFFFFFFF
        assert bool(out[b, t, tok]) == bool(word >> (tok % 32) & 1)
