"""The default orchestration: the kind read from real benchmark prompts, and teams that never waste a member."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lemon.benchmarks.registry import BENCHMARKS, load_split
from lemon.orchestrator.template import TemplateOrchestrator, task_kind, team_of, team_spec, teams_data
from lemon.runtime.executor import required_agents
from lemon.sandbox.runner import SandboxError
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
        for kind in teams_data():
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


def test_a_code_task_gets_five_programmers_behind_its_examples_only_when_it_shows_runnable_ones(
        data_dir: Path) -> None:
    """Real HumanEval `train` prompts: doctest examples (HumanEval/47) or examples in prose (HumanEval/95) send
    the task to exsc's team, agent for agent (names aside, which no request holds, so it draws exsc's samples);
    a task whose examples are not readable (HumanEval/67 writes `f(x) -> 19 - 5 - 6 = 8`) to one programmer."""
    from lemon.benchmarks.humaneval import code_prompt
    from lemon.evaluation.baselines import baseline_spec

    items = {str(i.id): i for i in load_split("humaneval", "train", data_dir)}
    assert [team_of(code_prompt(items[i])) for i in ("HumanEval/47", "HumanEval/95", "HumanEval/67")] == \
        ["code", "code", "code_unchecked"]
    assert team_of("What is 2 + 2?") == "number"
    team, exsc = team_spec("code", ROLES, ("small", "large")), baseline_spec("exsc", "code", level="large")
    assert [(a.role, a.duty, a.capacity, len(a.depends_on), a.stop) for a in team.agents] == \
        [(a.role, a.duty, a.capacity, len(a.depends_on), a.stop) for a in exsc.agents]
    one = team_spec("code_unchecked", ROLES, ("small", "large"))
    assert [(a.role, a.duty, a.capacity) for a in one.agents] == [("programmer", "", "large")]


def test_without_a_sandbox_a_code_task_with_examples_gets_one_programmer_and_a_warning(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from lemon.benchmarks.humaneval import code_prompt
    from lemon.runtime import examples_gate

    def missing() -> str:
        raise SandboxError("`bwrap` not found on PATH: code checks need it; install bubblewrap")

    monkeypatch.setattr(examples_gate, "sandbox", missing)
    task = code_prompt(load_split("humaneval", "test", data_dir)[0])
    with caplog.at_level("WARNING", logger="lemon.orchestrator.template"):
        assert team_of(task) == "code_unchecked"
    assert "cannot be run here" in caplog.text and "bubblewrap" in caplog.text
    proposal = asyncio.run(TemplateOrchestrator(ROLES, ("small", "large")).propose(task))
    assert proposal.extra["team"] == "code_unchecked" and len(proposal.spec.agents) == 1


def test_a_number_task_gets_the_learned_rule_over_the_banks_prose_and_program_voters() -> None:
    """Issue 55: the number team is the learned rule (experiments/choose_default.py chose it on `train` items)
    over sc-cot's five prose voters and sc-pot's five program voters, agent for agent (names aside, which no
    request holds), so it draws the bank's samples; without a sandbox, esc's team, agent for agent."""
    from lemon.evaluation.baselines import baseline_spec
    from lemon.spec.model import StopRule

    def shape(spec: object) -> list[tuple[str, str, str]]:
        return [(a.role, a.duty, a.capacity) for a in spec.agents if a.name != "vote"]  # type: ignore[attr-defined]

    assert team_of("What is 2 + 2?") == "number"
    team = team_spec("number", ROLES, ("small", "large"))
    prose, programs = baseline_spec("sc-cot", "number", level="large"), baseline_spec("sc-pot", "number", level="large")
    assert shape(team) == shape(prose) + shape(programs)
    vote = team.agent("vote")
    assert vote.stop == StopRule(learned="number") and len(vote.depends_on) == 10 and team.output == "vote"
    unchecked, esc = team_spec("number_unchecked", ROLES, ("small", "large")), baseline_spec("esc", "number",
                                                                                             level="large")
    assert shape(unchecked) == shape(esc) and unchecked.agent("vote").stop == esc.agents[-1].stop


def test_without_a_sandbox_a_number_task_gets_prose_voters_and_a_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from lemon.runtime import examples_gate

    def missing() -> str:
        raise SandboxError("`bwrap` not found on PATH: code checks need it; install bubblewrap")

    monkeypatch.setattr(examples_gate, "sandbox", missing)
    with caplog.at_level("WARNING", logger="lemon.orchestrator.kinds"):
        assert team_of("Tom has 3 apples and buys 4 more. How many apples does he have?") == "number_unchecked"
    assert "program voters cannot run here" in caplog.text and "bubblewrap" in caplog.text
    proposal = asyncio.run(TemplateOrchestrator(ROLES, ("small", "large")).propose("What is 2 + 2?"))
    assert proposal.extra["team"] == "number_unchecked"
    assert {a.role for a in proposal.spec.agents} == {"math_solver", "majority_vote"}


UNFENCED = ("Complete this function:\n\ndef add(a: int, b: int) -> int:\n    \"\"\"The sum.\n    >>> add(2, 3)\n"
            "    5\n    \"\"\"\n\nThanks!")


async def test_a_function_pasted_without_a_fence_gets_the_gated_team_and_its_checked_program() -> None:
    """Issue 52: the kind detector read an unfenced function as code but the gate's reader did not read its
    examples, so it got one unchecked programmer. One reader now: five programmers behind its examples, and the
    first program that passes them is the answer, shown as code. The programmers are a scripted test double:
    the first writes `return 1` and closes in prose, the others the right program."""
    from lemon.inspection.tracefile import extracted_answer
    from lemon.llm.base import GenParams
    from lemon.llm.scripted import ScriptedBackend
    from lemon.runtime import Executor
    from tests.pools import scripted_pool

    assert task_kind(UNFENCED) == "code" and team_of(UNFENCED) == "code"
    proposal = await TemplateOrchestrator(ROLES, ("small", "large")).propose(UNFENCED)
    assert proposal.extra["team"] == "code" and len(proposal.spec.agents) == 6
    replies = iter(["```python\ndef add(a, b):\n    return 1\n```\nThis returns the sum.",
                    *["```python\ndef add(a, b):\n    return a + b\n```\nThis adds a and b."] * 5])
    pool = scripted_pool(ScriptedBackend("scripted", responder=lambda request: next(replies)))
    result = await Executor(pool, ROLES, params=GenParams(temperature=0.7)).run(proposal.spec, UNFENCED)  # 5 draws
    assert result.calls == 2 and result.early_stops[0]["sure"] == "programmer_2"
    assert extracted_answer(UNFENCED, result.answer) == "def add(a, b):\n    return a + b\n"
