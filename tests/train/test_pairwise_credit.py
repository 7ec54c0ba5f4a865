"""Pairwise field credit (`credit.cf_form: pairwise`): a counterfactual as a preference between the written
and the edited value at the first token where the two texts differ.

Why it exists (issue 10): the span term's gradient on a token is A * (onehot - p), so once the policy writes a
field with p ~ 1 (28 of 29 credited spans after 5 steps of the CPU run) a better edit cannot move it.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.train
import torch  # noqa: E402

from lemon.spec.render import FieldRef  # noqa: E402
from lemon.train.batch import build_batch  # noqa: E402
from lemon.train.config import CreditConfig, TrainConfig  # noqa: E402
from lemon.train.credit import (  # noqa: E402
    CounterfactualTerm,
    FieldPair,
    counterfactual_advantages,
    counterfactual_loss,
    pairwise_field_loss,
    token_logprobs,
)
from lemon.train.reward import RewardBreakdown  # noqa: E402
from lemon.train.rollout import Counterfactual, GroupResult, Sample  # noqa: E402
from lemon.train.simulate import SlotPolicy  # noqa: E402
from lemon.train.token_spans import edit_window, first_divergence  # noqa: E402
from lemon.train.update import policy_update  # noqa: E402


def _logits(p_written: float) -> torch.Tensor:
    """[1, 2, 3] logits: position 1 (completion token 0) writes token 0 with probability `p_written`."""
    z = torch.zeros(1, 2, 3)
    z[0, 0, 0] = float(torch.log(torch.tensor(p_written / ((1 - p_written) / 2))))
    return z.requires_grad_(True)


@pytest.mark.parametrize("delta", [-1.0, 1.0])
def test_a_settled_token_still_moves_toward_a_better_edit(delta: float) -> None:
    """Written with p = 0.9999: the span term's gradient is ~1e-4, the pairwise one ~|Δ| when the edit is
    better (Δ < 0) and ~0 when the written value is already the better one (Δ > 0)."""
    ids = torch.tensor([[0]])
    span_logits, pair_logits = _logits(0.9999), _logits(0.9999)
    lp = token_logprobs(span_logits, ids, 1)
    counterfactual_loss(lp, counterfactual_advantages(1, [CounterfactualTerm([0], delta)])[None], torch.ones(1, 1)
                        ).backward()
    lp2 = token_logprobs(pair_logits, ids, 1, alt_ids=torch.tensor([[1]]))
    assert lp2.shape == (1, 1, 2)
    pairwise_field_loss(lp2, [[FieldPair(0, 1, delta)]]).backward()
    span_grad, pair_grad = span_logits.grad[0, 0].norm(), pair_logits.grad[0, 0].norm()
    assert span_grad < 2e-4
    if delta < 0:
        assert pair_grad > 0.5 and pair_logits.grad[0, 0, 1] < 0  # descent raises the edited token's logit
    else:
        assert pair_grad < 2e-4
    assert pair_logits.grad[0, 1].abs().max() == 0  # only the pair's position gets a gradient


def test_zero_delta_or_weight_is_no_loss() -> None:
    lp = token_logprobs(_logits(0.5), torch.tensor([[0]]), 1, alt_ids=torch.tensor([[1]]))
    assert float(pairwise_field_loss(lp, [[FieldPair(0, 1, 0.0), FieldPair(0, 1, 1.0, weight=0.0)]])) == 0.0


def _chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_first_divergence_is_the_first_token_the_edit_changes(tokenizer: Any) -> None:
    text = "agents:\n  - name: a\n    capacity: large\n    depends_on: [x, y]\n"
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = [(int(a), int(b)) for a, b in enc["offset_mapping"]]

    def tok(t: str) -> list[int]:
        return list(tokenizer(t, add_special_tokens=False)["input_ids"])

    start = text.index("large")
    pos, alt = first_divergence(ids, offsets, text, start, start + 5, "medium", tok)
    edited = tok(text.replace("large", "medium"))
    assert ids[:pos] == edited[:pos] and edited[pos] == alt != ids[pos]
    y = text.index("y]")
    s, e, repl = edit_window(text, y, y + 1, "edge", "")
    assert text[:s] + repl + text[e:] == text.replace("[x, y]", "[x]")
    pos, alt = first_divergence(ids, offsets, text, s, e, repl, tok)
    edited = tok(text.replace("[x, y]", "[x]"))
    assert ids[:pos] == edited[:pos] and edited[pos] == alt != ids[pos]
    assert first_divergence(ids, offsets, text, start, start + 5, "large", tok) is None  # no change


def test_edit_window_takes_the_separator_of_a_deleted_edge() -> None:
    text = "depends_on: [x, y, z]"
    for name, expected in (("x", "[y, z]"), ("y", "[x, z]"), ("z", "[x, y]")):
        i = text.index(name)
        s, e, repl = edit_window(text, i, i + 1, "edge", "")
        assert text[:s] + repl + text[e:] == f"depends_on: {expected}"
    assert edit_window("capacity: large", 10, 15, "capacity", "small") == (10, 15, "small")


def _group(policy: SlotPolicy, delta: float) -> tuple[GroupResult, list[Any]]:
    (comp,) = policy.sample([[0]], max_new_tokens=64, temperature=1.0, seed=3)
    start = comp.text.index("capacity: ") + len("capacity: ")
    end = start + len(comp.text[start:].split("\n", 1)[0])
    other = "large" if comp.text[start:end] != "large" else "small"
    cf = Counterfactual("level", FieldRef("capacity", "solver"), start, end, delta=delta, edited_reward=0.0,
                        spent_tokens=1, estimated_tokens=1, cache_hits=0, calls=1, edited_value=other)
    sample = Sample(completion=comp.text, valid=True, canonical_at=0, cf=cf)
    sample.reward = RewardBreakdown(0.0, 0.0, 0.0, 0.0, 0.0, True)
    return GroupResult("t", [sample]), [comp]


def test_build_batch_puts_the_pair_at_the_capacity_token() -> None:
    policy = SlotPolicy.create()
    group, comps = _group(policy, -1.0)
    batch = build_batch([group], [comps], CreditConfig(cf_form="pairwise"), alternative=policy.alternative)
    ((pair,),) = batch.cf_pairs
    assert batch.cf_terms == [[]] and batch.has_signal()
    assert policy.vocab[comps[0].ids[pair.position]] == comps[0].text[group.samples[0].cf.char_start:
                                                                      group.samples[0].cf.char_end]
    assert policy.vocab[pair.alt_id] == group.samples[0].cf.edited_value
    span = build_batch([group], [comps], CreditConfig(), alternative=policy.alternative)
    assert span.cf_pairs == [[]] and len(span.cf_terms[0]) == 1  # the default form is unchanged


@pytest.mark.parametrize("form", ["span", "pairwise"])
def test_only_pairwise_credit_unsettles_a_settled_worse_value(form: str) -> None:
    """The learning claim in miniature: the policy writes the solver's level with p ~ 0.9999 and every
    counterfactual says the edit is better. Ten updates of counterfactual credit alone: pairwise moves it,
    the span term cannot (this test fails for pairwise with cf_weight 0)."""
    policy = SlotPolicy.create()
    group, comps = _group(policy, -1.0)
    k = group.samples[0].cf
    pos = next(i for i, (a, _) in enumerate(comps[0].offsets) if a == k.char_start)
    with torch.no_grad():
        policy.model.theta[pos, comps[0].ids[pos]] = 12.0  # p(written) ~ 0.99998
    cfg = TrainConfig.model_validate({"credit": {"kl_beta": 0.0, "cf_form": form}, "optim": {"lr": 0.1}})
    opt = torch.optim.SGD(policy.model.parameters(), lr=20.0)
    for _ in range(10):
        batch = build_batch([group], [comps], cfg.credit, alternative=policy.alternative)
        policy_update(policy.model, batch, opt, cfg, 0)
    p_written = torch.softmax(policy.model.slot_logits()[pos], -1)[comps[0].ids[pos]]
    if form == "pairwise":
        assert p_written < 0.5
    else:
        assert p_written > 0.999
