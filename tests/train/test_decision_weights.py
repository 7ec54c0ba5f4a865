"""The SFT loss's decision weights: the fields whose value differs between targets are found from the data,
and exactly their tokens (under the real SmolLM2 tokenizer) carry the weight."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lemon.errors import LemonError
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.budget_teacher import budget_candidates
from lemon.train.decision_weights import decision_kinds, decision_token_weights, field_spans


def _targets(*labels: str) -> list[str]:
    teams = dict(budget_candidates("number", RoleLibrary.load(), "large"))
    return [render_spec(teams[label]).text for label in labels]


def test_the_decision_is_the_field_whose_value_differs_between_targets() -> None:
    gates = _targets("gate-50", "gate", "gate-25", "gate")
    assert decision_kinds(gates) == {"stop"}  # the three budget-teacher teams differ in the threshold alone
    assert decision_kinds(_targets("gate", "gate")) == frozenset()  # one team: no choice in the data
    assert {"stop", "copies"} <= decision_kinds(_targets("cot", "esc"))  # a vote or one agent
    assert decision_kinds(["agents: [not canonical", *gates[:1]]) == frozenset()  # unparsable text left out
    assert field_spans("agents:\n- {name: a, role: math_solver, capacity: large}\n") is None  # not canonical


@pytest.mark.train
def test_exactly_the_decision_tokens_carry_the_weight(tokenizer: Any) -> None:
    (text,) = _targets("gate-50")
    ids, weights = decision_token_weights(tokenizer, text, frozenset({"stop"}), 20.0)
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(weights) == len(ids) and set(weights) == {1.0, 20.0}
    heavy = tokenizer.decode([t for t, w in zip(ids, weights, strict=True) if w == 20.0])
    assert "logprob: -50, agree: 2" in heavy and "math_solver" not in heavy
    assert sum(w == 20.0 for w in weights) < 20  # the rule, not the layout
    assert decision_token_weights(tokenizer, text, frozenset(), 20.0) == (ids, [1.0] * len(ids))


@pytest.mark.train
def test_sft_rows_weigh_the_decision_and_leave_eos_and_prompt_alone(tokenizer: Any) -> None:
    from lemon.train.sft import SFTExample, sft_rows

    examples = [SFTExample(f"toy/{i}", "What is 2 + 2?", t, "bank", None)
                for i, t in enumerate(_targets("gate-50", "gate"))]
    plain = sft_rows(tokenizer, 0, examples, RoleLibrary.load(), ["large"], "terse", 1.0)
    weighted = sft_rows(tokenizer, 0, examples, RoleLibrary.load(), ["large"], "terse", 10.0)
    for (p1, c1, w1), (p2, c2, w2) in zip(plain, weighted, strict=True):
        assert p1 == p2 and c1 == c2 and len(w2) == len(c2) and w2[-1] == 1.0  # EOS at 1
        assert set(w1) == {1.0} and max(w2) == 10.0


@pytest.mark.parametrize("weight", [0.5, 1000.0])
async def test_a_decision_weight_out_of_range_is_one_line_before_anything_is_written(tmp_path: Path,
                                                                                     weight: float) -> None:
    from lemon.train.sft import SFTSettings, run_sft

    with pytest.raises(LemonError, match="--decision-weight"):
        await run_sft(SFTSettings(out_dir=tmp_path / "sft", decision_weight=weight))
    assert not (tmp_path / "sft").exists()
