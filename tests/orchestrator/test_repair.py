"""Repair and fallback of orchestrator output (pure functions; no model needed)."""

from __future__ import annotations

import json

import pytest

from lemon.orchestrator.repair import extract_object_text, fallback_spec, spec_from_output
from lemon.spec.roles import RoleLibrary
from tests.pools import LEVELS


@pytest.fixture(scope="module")
def roles() -> RoleLibrary:
    return RoleLibrary.load()


def _agent(name: str, deps: list[str], role: str = "math_solver", capacity: str = "small") -> dict:
    return {"name": name, "role": role, "duty": "", "capacity": capacity, "depends_on": deps}


def test_valid_output_is_used_as_written(roles: RoleLibrary) -> None:
    raw = json.dumps({"agents": [_agent("a", []), _agent("b", ["a"])], "output": "b"})
    spec, source, warnings = spec_from_output(raw, roles, LEVELS)
    assert source == "model" and warnings == ()
    assert spec.output == "b" and spec.agent("b").depends_on == ("a",)


def test_output_naming_no_agent_is_repaired_to_the_unique_sink(roles: RoleLibrary) -> None:
    raw = json.dumps({"agents": [_agent("a", []), _agent("b", ["a"])], "output": "final_answer"})
    spec, source, warnings = spec_from_output(raw, roles, LEVELS)
    assert source == "repaired"
    assert spec.output == "b"
    assert any("final_answer" in w for w in warnings)


def test_forward_self_and_unknown_references_are_dropped(roles: RoleLibrary) -> None:
    agents = [_agent("a", ["b", "a", "ghost"]), _agent("b", ["a", "a"])]
    spec, source, warnings = spec_from_output(json.dumps({"agents": agents, "output": "b"}), roles, LEVELS)
    assert source == "repaired"
    assert spec.agent("a").depends_on == ()
    assert spec.agent("b").depends_on == ("a",)
    assert sum("dropped dependency" in w for w in warnings) == 4


def test_repair_keeps_edges_to_later_agents_when_the_graph_is_acyclic(roles: RoleLibrary) -> None:
    # the judge is written first and the capacity is unknown: repaired, but no edge may be lost
    agents = [_agent("judge", ["first", "second"], capacity="huge"), _agent("first", []),
              _agent("second", ["first"])]
    spec, source, warnings = spec_from_output(json.dumps({"agents": agents, "output": "judge"}), roles, LEVELS)
    assert source == "repaired" and not any("dropped" in w for w in warnings)
    assert spec.agent("judge").depends_on == ("first", "second") and spec.agent("second").depends_on == ("first",)
    assert spec.output == "judge"


def test_unknown_role_and_capacity_and_duplicate_names(roles: RoleLibrary) -> None:
    agents = [_agent("a", [], role="wizard", capacity="huge"), _agent("a", ["a"])]
    spec, source, warnings = spec_from_output(json.dumps({"agents": agents}), roles, LEVELS)
    assert source == "repaired"
    assert spec.agents[0].role == "generalist" and spec.agents[0].capacity == "medium"
    assert spec.names == ("a", "a_2") and spec.output == "a_2"
    assert len(warnings) >= 3


def test_unusable_output_falls_back_with_a_warning(roles: RoleLibrary) -> None:
    for raw in ("I cannot help with that.", '{"agents": []}', "{not json", '{"agents": "x"}'):
        spec, source, warnings = spec_from_output(raw, roles, LEVELS)
        assert source == "fallback"
        assert spec == fallback_spec(LEVELS).model_copy(update={"output": "reviewer"})
        assert len(warnings) == 1 and "default spec" in warnings[0]


def test_fallback_maps_positions_onto_any_pool() -> None:
    spec = fallback_spec(("lo", "hi"))
    assert [a.capacity for a in spec.agents] == ["hi", "hi"]
    spec3 = fallback_spec(LEVELS)
    assert [a.capacity for a in spec3.agents] == ["medium", "large"]


def test_extract_object_text_from_fenced_and_chatty_replies() -> None:
    assert extract_object_text('Sure!\n```json\n{"a": 1}\n```\nDone.') == '{"a": 1}'
    assert extract_object_text('Here it is: {"a": 1}') == '{"a": 1}'
    assert extract_object_text("ok\nagents:\n  - name: x").startswith("agents:")


def test_hostile_yaml_in_output_does_not_expand(roles: RoleLibrary) -> None:
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    spec, source, _ = spec_from_output(bomb, roles, LEVELS)
    assert source == "fallback" and len(spec.agents) == 2


def test_output_with_descendants_is_moved_to_the_sink_below_it() -> None:
    """Issue 11: a middle agent named as output left the strongest agent after it unrun."""
    from lemon.orchestrator.repair import spec_from_output
    from lemon.spec.roles import RoleLibrary

    raw = ("agents:\n"
           "  - {name: extractor, role: analyst, duty: '', capacity: small, depends_on: []}\n"
           "  - {name: solver, role: math_solver, duty: '', capacity: medium, depends_on: [extractor]}\n"
           "  - {name: decider, role: final_decision_maker, duty: '', capacity: large, depends_on: [solver]}\n"
           "output: solver\n")
    spec, source, warnings = spec_from_output(raw, RoleLibrary.load(), ("small", "medium", "large"))
    assert spec.output == "decider" and source == "repaired"
    assert not spec.descendants(spec.final_agent())
    assert any("decider" in w and "never run" in w for w in warnings)
