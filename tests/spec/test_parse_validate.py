"""Parsing and validation: good specs load, and every kind of bad or hostile input is one clear SpecError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lemon.errors import SpecError
from lemon.spec.parse import parse_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import load_spec, topological_order
from tests.pools import LEVELS

GOOD = """
agents:
  - name: analyst
    role: analyst
    duty: "List the quantities."
    capacity: small
  - name: solver
    role: math_solver
    capacity: large
    depends_on: [analyst]
"""


@pytest.fixture(scope="module")
def roles() -> RoleLibrary:
    return RoleLibrary.load()


def _agent(name: str, deps: list[str], **kw: str) -> dict[str, object]:
    return {"name": name, "role": kw.get("role", "generalist"), "duty": "", "capacity": kw.get("capacity", "small"),
            "depends_on": deps}


def test_good_yaml_and_json_load_and_output_defaults_to_the_unique_sink(roles: RoleLibrary) -> None:
    spec = load_spec(GOOD, roles, LEVELS)
    assert spec.output == "solver" and spec.agent("solver").depends_on == ("analyst",)
    as_json = json.dumps({"agents": [_agent("a", []), _agent("b", ["a"])]})
    assert load_spec(as_json, roles, LEVELS).output == "b"


def test_child_listed_before_its_parent_is_fine_and_ordered(roles: RoleLibrary) -> None:
    text = json.dumps({"agents": [_agent("b", ["a"]), _agent("a", [])]})
    spec = load_spec(text, roles, LEVELS)
    assert topological_order(spec) == ("a", "b")


def _bomb() -> str:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 10):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    lines.append("agents: *j")
    return "\n".join(lines)


BAD = {
    "malformed YAML": ("agents:\n  - name: a\n   role: [unclosed", "malformed YAML"),
    "YAML bomb": (_bomb(), "anchors/aliases"),
    "python tag": ("agents: !!python/object/apply:os.system ['echo pwned']", "malformed YAML"),
    "10,000 agents": (json.dumps({"agents": [_agent(f"a{i}", []) for i in range(10_000)]}), "characters"),
    "13 agents": (json.dumps({"agents": [_agent(f"a{i}", []) for i in range(13)]}), "at most 12"),
    "cycle": (json.dumps({"agents": [_agent("a", ["c"]), _agent("b", ["a"]), _agent("c", ["b"])]}), "cycle"),
    "self-dependency": (json.dumps({"agents": [_agent("a", ["a"])]}), "cannot depend on itself"),
    "unknown dependency": (json.dumps({"agents": [_agent("a", ["ghost"])]}), "no agent is named 'ghost'"),
    "unknown capacity": (json.dumps({"agents": [_agent("a", [], capacity="huge")]}), "unknown level 'huge'"),
    "unknown role": (json.dumps({"agents": [_agent("a", [], role="wizard")]}), "unknown base role 'wizard'"),
    "duplicate names": (json.dumps({"agents": [_agent("a", []), _agent("a", [])]}), "duplicate agent name"),
    "two sinks, no output": (json.dumps({"agents": [_agent("a", []), _agent("b", [])]}), "2 final agents"),
    "unknown output": (json.dumps({"agents": [_agent("a", [])], "output": "zed"}), "no agent is named 'zed'"),
    "bad name": (json.dumps({"agents": [_agent("Bad Name", [])]}), "lower_snake_case"),
    "YAML keyword name": ("agents:\n  - {name: yes, role: generalist, capacity: small}", "field name"),
    "not a mapping": ("- just\n- a list", "must be a mapping"),
    "empty": ("   \n", "empty"),
    "extra field": (json.dumps({"agents": [{**_agent("a", []), "tools": ["rm"]}]}), "unknown field"),
    "deep nesting": ("[" * 20_000 + "]" * 20_000, "characters"),
    "vote without parents": (json.dumps({"agents": [_agent("v", [], role="majority_vote")]}), "needs depends_on"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_spec_error(case: str, roles: RoleLibrary) -> None:
    text, expected = BAD[case]
    with pytest.raises(SpecError) as err:
        load_spec(text, roles, LEVELS)
    message = str(err.value)
    assert expected in message
    assert "\n" not in message and len(message) < 400


def test_error_names_the_agent_and_field() -> None:
    with pytest.raises(SpecError, match=r"agent 2 \('b'\), field duty"):
        parse_spec(json.dumps({"agents": [_agent("a", []), {**_agent("b", []), "duty": "x" * 301}]}))


def test_nested_flow_within_size_bound_is_rejected_cleanly() -> None:
    with pytest.raises(SpecError):
        parse_spec("agents: " + "[" * 5_000 + "]" * 5_000)


def test_an_unknown_key_inside_stop_lists_the_stop_rules_fields_not_the_agents(tmp_path: Path,
                                                                              _isolated_home: Path) -> None:
    """Issue 52: `stop: {agree: 2, maxx: 2}` was answered with the agent's fields (name, role, duty...)."""
    from tests.cli.test_cli_core import assert_clean_error, lemon

    spec = tmp_path / "s.yaml"
    spec.write_text("agents:\n  - {name: a, role: generalist, capacity: small}\n"
                    "  - {name: b, role: generalist, capacity: small}\n"
                    "  - {name: v, role: majority_vote, capacity: small, depends_on: [a, b],\n"
                    "     stop: {agree: 2, maxx: 2}}\n")
    proc = lemon("validate", str(spec), "--pool", "tiny", home=_isolated_home)
    assert_clean_error(proc, "agent 3 ('v'), field stop.maxx: unknown field; allowed in stop: agree, confidence, max, "
                             "wave, logprob, examples, learned, posterior")
    assert len(proc.stderr.strip().splitlines()) == 1 and "depends_on" not in proc.stderr
