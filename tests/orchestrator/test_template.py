"""The default orchestration: the kind read from real benchmark prompts, and teams that never waste a member."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lemon.benchmarks.registry import BENCHMARKS, load_split
from lemon.orchestrator.template import KINDS, TemplateOrchestrator, task_kind, team_spec
from lemon.runtime.executor import required_agents
from lemon.spec.roles import RoleLibrary

ROLES = RoleLibrary.load()


def test_kind_of_every_benchmarks_own_prompts(data_dir: Path) -> None:
    """External truth: the benchmark's own prompt of its first 50 items is read as the benchmark's kind."""
    for name, bench in BENCHMARKS.items():
        items = load_split(name, bench.default_split, data_dir)[:50]
        kinds = {task_kind(bench.prompt(it)) for it in items}
        assert kinds == {bench.kind}, (name, kinds)


def test_readme_example_is_a_word_problem() -> None:
    assert task_kind("Natalia sold clips to 48 of her friends in April, and then she sold half as many "
                     "clips in May. How many clips did Natalia sell altogether in April and May?") == "number"


def test_every_team_is_valid_and_runs_every_agent_on_every_pool_shape() -> None:
    for levels in (("small", "medium", "large"), ("only",), ("a", "b")):
        for kind in KINDS:
            spec = team_spec(kind, ROLES, levels)
            assert required_agents(spec) == {a.name for a in spec.agents}  # nothing pruned
            assert not spec.descendants(spec.final_agent())
            assert any(a.capacity == levels[-1] for a in spec.agents)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_default_spec_output_never_has_descendants(task: str) -> None:
    proposal = asyncio.run(TemplateOrchestrator(ROLES, ("small", "medium", "large")).propose(task))
    spec = proposal.spec
    assert not spec.descendants(spec.final_agent())
    assert proposal.source == "template" and proposal.tokens == 0


def test_a_team_of_the_data_file_may_carry_a_stop_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """teams.yaml can name a stop-rule team (issue 24: the default uses the best measured one)."""
    from lemon.orchestrator import template
    from lemon.spec.model import StopRule
    from lemon.spec.roles import RoleLibrary

    voters = [{"name": f"v{i}", "role": "math_solver", "capacity": "strongest"} for i in range(3)]
    team = {"agents": [*voters, {"name": "vote", "role": "majority_vote", "capacity": "strongest",
                                 "depends_on": ["v0", "v1", "v2"], "stop": {"agree": 2}}], "output": "vote"}
    monkeypatch.setattr(template, "teams_data", lambda: {"number": team})
    spec = template.team_spec("number", RoleLibrary.load(), ("small", "medium", "large"))
    assert spec.agent("vote").stop == StopRule(agree=2) and spec.agent("v2").capacity == "large"
