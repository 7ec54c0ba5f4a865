"""The trained orchestrator behind the Orchestrator interface, and the policy prompt / strict reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.errors import ConfigError, ModelFileError
from lemon.orchestrator.policy_prompt import (
    POLICY_META,
    policy_messages,
    read_prompt_style,
    strict_spec,
    write_prompt_style,
)
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


def test_the_terse_prompt_is_the_task_alone_and_shorter() -> None:
    """Issue 24 counts the orchestrator's own tokens: a fine-tuned policy needs neither the role list nor the
    example, so the terse prompt carries the task and one line, and nothing of the full prompt's library."""
    task = "Tom has 2 apples and buys 3 more. How many apples does he have?"
    full = policy_messages(task, ROLES, ("low", "mid", "high"))
    terse = policy_messages(f"  {task}  ", ROLES, ("low", "mid", "high"), "terse")
    assert terse[1]["content"] == task
    assert "math_solver" not in terse[0]["content"] + terse[1]["content"]
    assert len("".join(m["content"] for m in terse)) < len("".join(m["content"] for m in full)) / 3
    with pytest.raises(ConfigError, match="unknown policy prompt 'chatty'; use one of full, terse"):
        policy_messages(task, ROLES, ("low",), "chatty")


def test_a_policy_records_its_prompt_style_beside_its_weights(tmp_path: Path) -> None:
    """Written by every save, read by inference; a policy without the record was trained on the full prompt,
    and a broken record is one line naming the file and the fix."""
    assert read_prompt_style(tmp_path) == "full"
    write_prompt_style(tmp_path, "full")
    assert not (tmp_path / POLICY_META).exists()  # the default leaves no file behind
    write_prompt_style(tmp_path, "terse")
    assert read_prompt_style(tmp_path) == "terse"
    gguf = tmp_path / "policy.gguf"
    write_prompt_style(gguf, "terse")  # beside a .gguf file: its own record
    assert (tmp_path / f"policy.{POLICY_META}").is_file() and read_prompt_style(gguf) == "terse"
    write_prompt_style(gguf, "full")  # a full policy exported over a terse one leaves no stale record
    assert read_prompt_style(gguf) == "full" and not (tmp_path / f"policy.{POLICY_META}").exists()
    (tmp_path / POLICY_META).write_text('{"prompt": "chatty"}')
    with pytest.raises(ModelFileError, match="unknown prompt style 'chatty'"):
        read_prompt_style(tmp_path)
    (tmp_path / POLICY_META).write_text("not json")
    with pytest.raises(ModelFileError, match="delete it to use the full prompt") as exc:
        read_prompt_style(tmp_path)
    assert "\n" not in str(exc.value)


@pytest.mark.train
async def test_a_terse_policy_is_asked_with_the_terse_prompt(tmp_path: Path, policy_dir: Path) -> None:
    """The prompt a policy was fine-tuned on is the one inference uses: the record beside the weights picks
    it, and the proposal's prompt tokens show it (the full prompt of the same task is several times longer)."""
    import shutil

    task = "Tom has 2 apples and buys 3 more. How many apples does he have?"
    full = await TrainedOrchestrator(policy_dir, ROLES, LEVELS, max_new_tokens=4).propose(task)
    terse_dir = tmp_path / "terse"
    shutil.copytree(policy_dir, terse_dir)
    write_prompt_style(terse_dir, "terse")
    orch = TrainedOrchestrator(terse_dir, ROLES, LEVELS, max_new_tokens=4)
    terse = await orch.propose(task)
    assert orch.prompt_style == "terse"
    assert terse.prompt_tokens * 3 < full.prompt_tokens
