"""Repair and fallback of orchestrator output (pure functions; no model needed)."""

from __future__ import annotations

import json

import pytest

from lemon.orchestrator.repair import extract_object_text, fallback_spec, spec_from_output
from lemon.orchestrator.template import task_kind, team_of, team_spec
from lemon.spec.roles import RoleLibrary
from tests.pools import LEVELS


@pytest.fixture(scope="module")
def roles() -> RoleLibrary:
    return RoleLibrary.load()


def _agent(name: str, deps: list[str], role: str = "math_solver", capacity: str = "small") -> dict:
    return {"name": name, "role": role, "duty": "", "capacity": capacity, "depends_on": deps}


def test_valid_output_is_used_as_written(roles: RoleLibrary) -> None:
    raw = json.dumps({"agents": [_agent("a", []), _agent("b", ["a"])], "output": "b"})
    spec, source, warnings = spec_from_output(raw, "2+2?", roles, LEVELS)
    assert source == "model" and warnings == ()
    assert spec.output == "b" and spec.agent("b").depends_on == ("a",)


def test_output_naming_no_agent_is_repaired_to_the_unique_sink(roles: RoleLibrary) -> None:
    raw = json.dumps({"agents": [_agent("a", []), _agent("b", ["a"])], "output": "final_answer"})
    spec, source, warnings = spec_from_output(raw, "2+2?", roles, LEVELS)
    assert source == "repaired"
    assert spec.output == "b"
    assert any("final_answer" in w for w in warnings)


def test_forward_self_and_unknown_references_are_dropped(roles: RoleLibrary) -> None:
    agents = [_agent("a", ["b", "a", "ghost"]), _agent("b", ["a", "a"])]
    spec, source, warnings = spec_from_output(json.dumps({"agents": agents, "output": "b"}), "2+2?", roles, LEVELS)
    assert source == "repaired"
    assert spec.agent("a").depends_on == ()
    assert spec.agent("b").depends_on == ("a",)
    assert sum("dropped dependency" in w for w in warnings) == 4


def test_repair_keeps_edges_to_later_agents_when_the_graph_is_acyclic(roles: RoleLibrary) -> None:
    # the judge is written first and the capacity is unknown: repaired, but no edge may be lost
    agents = [_agent("judge", ["first", "second"], capacity="huge"), _agent("first", []),
              _agent("second", ["first"])]
    raw = json.dumps({"agents": agents, "output": "judge"})
    spec, source, warnings = spec_from_output(raw, "2+2?", roles, LEVELS)
    assert source == "repaired" and not any("dropped" in w for w in warnings)
    assert spec.agent("judge").depends_on == ("first", "second") and spec.agent("second").depends_on == ("first",)
    assert spec.output == "judge"


def test_unknown_role_and_capacity_and_duplicate_names(roles: RoleLibrary) -> None:
    agents = [_agent("a", [], role="wizard", capacity="huge"), _agent("a", ["a"])]
    spec, source, warnings = spec_from_output(json.dumps({"agents": agents}), "2+2?", roles, LEVELS)
    assert source == "repaired"
    assert spec.agents[0].role == "generalist" and spec.agents[0].capacity == "medium"
    assert spec.names == ("a", "a_2") and spec.output == "a_2"
    assert len(warnings) >= 3


_TASKS = {"number": "Tom has 3 apples and buys 4 more. How many apples does he have?",
          "choice": "Which is a prime?\n(A) 4\n(B) 6\n(C) 7\n(D) 9",
          "code": "def add(a: int, b: int) -> int:\n    \"\"\"Return a + b.\"\"\"\n"}


@pytest.mark.parametrize("kind", sorted(_TASKS))
def test_unusable_output_runs_the_template_team_of_the_task_kind(roles: RoleLibrary, kind: str) -> None:
    """The fallback is the default orchestration's team for the task (fallback.yaml's solver and critic scored
    below chance on MMLU, and on HumanEval, where a policy wrote code instead of a spec, ran for every item)."""
    for raw in ("I cannot help with that.", '{"agents": []}', "{not json", '{"agents": "x"}', "```python\n"
                "def add(a, b):\n    return a + b\n```"):
        spec, source, warnings = spec_from_output(raw, _TASKS[kind], roles, LEVELS)
        assert source == "fallback" and task_kind(_TASKS[kind]) == kind
        assert spec == team_spec(team_of(_TASKS[kind]), roles, LEVELS) == fallback_spec(_TASKS[kind], roles, LEVELS)
        assert len(warnings) == 1 and "using the default orchestration's team" in warnings[0]
    roles_run = {a.role for a in spec.agents}
    assert roles_run == {"number": {"math_solver", "program_solver", "majority_vote"},
                         "choice": {"knowledge_expert", "majority_vote"},
                         "code": {"programmer"}}[kind]


def test_the_fallback_maps_onto_any_pool(roles: RoleLibrary) -> None:
    assert {a.capacity for a in fallback_spec(_TASKS["number"], roles, ("lo", "hi")).agents} == {"hi"}
    assert {a.capacity for a in fallback_spec(_TASKS["choice"], roles, LEVELS).agents} == {LEVELS[-1]}


def test_extract_object_text_from_fenced_and_chatty_replies() -> None:
    assert extract_object_text('Sure!\n```json\n{"a": 1}\n```\nDone.') == '{"a": 1}'
    assert extract_object_text('Here it is: {"a": 1}') == '{"a": 1}'
    assert extract_object_text("ok\nagents:\n  - name: x").startswith("agents:")


def test_hostile_yaml_in_output_does_not_expand(roles: RoleLibrary) -> None:
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    spec, source, _ = spec_from_output(bomb, "2+2?", roles, LEVELS)
    assert source == "fallback" and len(spec.agents) == 11  # the number team: 5 prose, 5 program voters, the vote


def test_output_with_descendants_is_moved_to_the_sink_below_it() -> None:
    """Issue 11: a middle agent named as output left the strongest agent after it unrun."""
    from lemon.orchestrator.repair import spec_from_output
    from lemon.spec.roles import RoleLibrary

    raw = ("agents:\n"
           "  - {name: extractor, role: analyst, duty: '', capacity: small, depends_on: []}\n"
           "  - {name: solver, role: math_solver, duty: '', capacity: medium, depends_on: [extractor]}\n"
           "  - {name: decider, role: final_decision_maker, duty: '', capacity: large, depends_on: [solver]}\n"
           "output: solver\n")
    spec, source, warnings = spec_from_output(raw, "2+2?", RoleLibrary.load(), ("small", "medium", "large"))
    assert spec.output == "decider" and source == "repaired"
    assert not spec.descendants(spec.final_agent())
    assert any("decider" in w and "never run" in w for w in warnings)
