"""The trained orchestrator behind the Orchestrator interface, and the policy prompt / strict reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.errors import ModelFileError
from lemon.orchestrator.policy_prompt import policy_messages, strict_spec
from lemon.orchestrator.trained import TrainedOrchestrator, resolve_policy_path
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from tests.spec_strategies import LEVELS

ROLES = RoleLibrary.load()


def test_policy_prompt_names_roles_levels_and_the_canonical_example() -> None:
    msgs = policy_messages("  What is 2+3?  ", ROLES, ("low", "mid", "high"))
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert "What is 2+3?" in user and "low, mid, high" in user and "math_solver" in user
    assert "majority_vote" not in user  # vote aggregators are not for free-form orchestration
    example = user[user.index("agents:"):]
    res = strict_spec(example, ROLES, ("low", "mid", "high"))
    assert res.spec is not None and render_spec(res.parsed).text.strip() == example.strip()


def test_strict_spec_refuses_what_repair_would_fix() -> None:
    text = "agents:\n  - name: a\n    role: wizard\n    capacity: small\n"
    res = strict_spec(text, ROLES, LEVELS)
    assert res.spec is None and "wizard" in (res.error or "")


def test_resolve_policy_path(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError):
        resolve_policy_path(tmp_path)
    with pytest.raises(ModelFileError):
        resolve_policy_path(tmp_path / "x.gguf")
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "config.json").write_text("{}")
    assert resolve_policy_path(tmp_path) == tmp_path / "final"


@pytest.mark.train
async def test_hf_policy_proposes_through_the_interface(policy_dir: Path) -> None:
    orch = TrainedOrchestrator(policy_dir, ROLES, LEVELS, max_new_tokens=24)
    proposal = await orch.propose("Tom has 2 apples and buys 3 more. How many apples does he have?")
    # 24 tokens of an untrained policy is never a whole spec: the documented fallback, never an exception
    assert proposal.source in ("model", "repaired", "fallback")
    assert proposal.completion_tokens <= 24 and proposal.prompt_tokens > 50
    assert proposal.spec.agents and proposal.extra["policy"] == str(policy_dir)
