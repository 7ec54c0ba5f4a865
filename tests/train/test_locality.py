"""Gradient locality and sign of the counterfactual term, on the real SmolLM2 policy.

The method requires a proof that the counterfactual term's gradient w.r.t. the logits of tokens outside
the edited field's span is exactly zero. The logits at sequence position t predict token t+1, so
completion token i (sequence position P+i) is scored by the logits at position P+i-1: the test checks
that the non-zero gradient rows are exactly {P+i-1 : i in span}, which catches an off-by-one mapping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

pytestmark = pytest.mark.train
import torch  # noqa: E402  (installed by the test command: missing fails, never skips)

from lemon.spec.model import Agent, Spec  # noqa: E402
from lemon.train.credit import (  # noqa: E402
    CounterfactualTerm,
    counterfactual_advantages,
    counterfactual_loss,
    per_token_advantages,
    policy_gradient_loss,
    token_logprobs,
)
from lemon.train.token_spans import char_span_to_token_indices, completion_offsets  # noqa: E402

SPEC = Spec(
    agents=(
        Agent(name="solver", role="math_solver", duty="Solve the problem step by step", capacity="small"),
        Agent(name="checker", role="critic", duty="Check the arithmetic of the solver", capacity="medium",
              depends_on=("solver",)),
        Agent(name="final", role="final_decision_maker", capacity="small", depends_on=("solver", "checker")),
    ),
    output="final",
)


@dataclass(frozen=True)
class Case:
    text: str
    spans: dict[Any, Any]
    prompt_len: int
    input_ids: Any  # [1, P+T]
    completion_ids: Any  # [1, T]
    offsets: list[tuple[int, int]]


@pytest.fixture(scope="module")
def case(policy: tuple[Any, Any]) -> Case:
    from lemon.spec.render import render_spec

    _, tok = policy
    rendered = render_spec(SPEC)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Task: what is 2 + 3? Write the spec."}],
                                     tokenize=False, add_generation_prompt=True)
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    ids, offsets = completion_offsets(tok, rendered.text)
    return Case(rendered.text, dict(rendered.spans), len(prompt_ids), torch.tensor([prompt_ids + ids]),
                torch.tensor([ids]), offsets)


@pytest.fixture(scope="module")
def base_logits(policy: tuple[Any, Any], case: Case) -> Any:
    model, _ = policy
    with torch.no_grad():
        return model(input_ids=case.input_ids).logits.detach().double()


def _span_tokens(case: Case, kind: str, agent: str, parent: str | None = None) -> list[int]:
    ref = next(r for r in case.spans if r.kind == kind and r.agent == agent and r.parent == parent)
    idx = char_span_to_token_indices(case.offsets, case.spans[ref])
    assert idx, f"span of {ref} maps to no tokens"
    return idx


def _assert_local(grad: Any, case: Case, idx: list[int]) -> None:
    """Rows of d loss / d logits are non-zero exactly at the positions predicting the span's tokens."""
    rows = grad[0]
    expected = sorted(case.prompt_len - 1 + i for i in idx)
    nonzero = (rows != 0).any(dim=-1).nonzero().flatten().tolist()
    assert nonzero == expected
    outside = torch.ones(rows.shape[0], dtype=torch.bool)
    outside[expected] = False
    assert torch.equal(rows[outside], torch.zeros_like(rows[outside]))
    for pos in expected:
        assert rows[pos].abs().sum() > 0


def test_counterfactual_gradient_is_local_through_the_real_model(policy: tuple[Any, Any], case: Case) -> None:
    model, _ = policy
    model.zero_grad(set_to_none=True)
    idx = _span_tokens(case, "duty", "checker")
    t = case.completion_ids.shape[1]
    logits = model(input_ids=case.input_ids).logits
    logits.retain_grad()
    lp = token_logprobs(logits, case.completion_ids, case.prompt_len)
    cf = counterfactual_advantages(t, [CounterfactualTerm(idx, delta=0.5, weight=1.0)]).unsqueeze(0)
    loss = counterfactual_loss(lp, cf, torch.ones(1, t))
    loss.backward()
    assert logits.grad is not None
    _assert_local(logits.grad, case, idx)
    # The signal reaches the weights (the path is not cut anywhere, e.g. by an .item()).
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("field", [("role", "solver", None), ("duty", "solver", None),
                                   ("capacity", "checker", None), ("edge", "final", "checker"),
                                   ("role", "final", None)])
@pytest.mark.parametrize("delta", [0.7, -0.7])
def test_locality_and_sign_for_every_field_kind(base_logits: Any, case: Case,
                                                field: tuple[str, str, str | None], delta: float) -> None:
    kind, agent, parent = field
    idx = _span_tokens(case, kind, agent, parent)
    t = case.completion_ids.shape[1]
    logits = base_logits.clone().requires_grad_()
    lp = token_logprobs(logits, case.completion_ids, case.prompt_len)
    cf = counterfactual_advantages(t, [CounterfactualTerm(idx, delta=delta, weight=1.0)]).unsqueeze(0)
    counterfactual_loss(lp, cf, torch.ones(1, t)).backward()
    _assert_local(logits.grad, case, idx)

    # One small gradient-descent step on the logits: Δ > 0 raises the span tokens' log-probs, Δ < 0
    # lowers them, and every other token's log-prob is bit-for-bit unchanged.
    with torch.no_grad():
        before = token_logprobs(base_logits, case.completion_ids, case.prompt_len)[0]
        after = token_logprobs(base_logits - 0.5 * t * logits.grad, case.completion_ids, case.prompt_len)[0]
    change = after - before
    inside = torch.zeros(t, dtype=torch.bool)
    inside[idx] = True
    assert torch.equal(change[~inside], torch.zeros_like(change[~inside]))
    assert bool((change[inside] > 0).all()) if delta > 0 else bool((change[inside] < 0).all())


def test_group_term_touches_every_position_and_sum_matches(base_logits: Any, case: Case) -> None:
    """The global GRPO term is not local (every completion position gets gradient), and splitting it
    from the counterfactual term gives the same gradient as one loss with combined advantages."""
    idx = _span_tokens(case, "capacity", "solver")
    t = case.completion_ids.shape[1]
    term = [CounterfactualTerm(idx, delta=0.4, weight=1.0)]
    mask = torch.ones(1, t)

    a = base_logits.clone().requires_grad_()
    lp = token_logprobs(a, case.completion_ids, case.prompt_len)
    policy_gradient_loss(lp, per_token_advantages(t, 1.2, term).unsqueeze(0), mask).backward()

    b = base_logits.clone().requires_grad_()
    lp = token_logprobs(b, case.completion_ids, case.prompt_len)
    (policy_gradient_loss(lp, torch.full((1, t), 1.2), mask)
     + counterfactual_loss(lp, counterfactual_advantages(t, term).unsqueeze(0), mask)).backward()

    assert a.grad is not None and b.grad is not None
    assert torch.allclose(a.grad, b.grad)
    rows = (a.grad[0] != 0).any(dim=-1).nonzero().flatten().tolist()
    assert rows == list(range(case.prompt_len - 1, case.prompt_len - 1 + t))
