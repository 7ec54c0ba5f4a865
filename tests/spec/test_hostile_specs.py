"""Hostile spec text: YAML's implicit typing, huge numbers, tags, markup, control characters and deep nesting.

The property: whatever the text, `load_spec` returns a spec or raises `SpecError` (one line), and the
trainer's `strict_spec` and the prompted orchestrator's `spec_from_output` return instead of raising.
Regressions from the probe of issue 12 are pinned first: each raised ValueError before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lemon.errors import SpecError
from lemon.orchestrator.policy_prompt import strict_spec
from lemon.orchestrator.repair import spec_from_output
from lemon.spec.model import MAX_SPEC_CHARS
from lemon.spec.parse import MAX_SPEC_BYTES, read_spec_file
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import load_spec
from tests.pools import LEVELS

ROLES = RoleLibrary.load()


def _yaml_spec(duty: str, name: str = "solver") -> str:
    return f"agents:\n  - name: {name}\n    role: math_solver\n    capacity: small\n    duty: {duty}\n"


# ---- pinned regressions -----------------------------------------------------------------------------------

@pytest.mark.parametrize("duty", ["2024-02-30", "2023-13-45", "2001-12-14t21:59:43.10-05:00", "9" * 4_301,
                                  "!!timestamp 2024-02-30", "!!int " + "9" * 5_000, "!!float 1e9999",
                                  "!!binary '###'", "!!set {a}", "190:20:30", "0o99", ".inf"])
def test_implicitly_typed_duties_never_raise_anything_but_spec_error(duty: str) -> None:
    """A duty YAML would read as an impossible date or an int over Python's 4,300-digit limit."""
    text = _yaml_spec(duty)
    try:
        spec = load_spec(text, ROLES, LEVELS)
    except SpecError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(spec.agents[0].duty, str)
    assert strict_spec(text, ROLES, LEVELS) is not None
    assert spec_from_output(text, "2+2?", ROLES, LEVELS)[0].agents


def test_an_impossible_date_is_read_as_the_duty_text() -> None:
    spec = load_spec(_yaml_spec("2024-02-30"), ROLES, LEVELS)
    assert spec.agents[0].duty == "2024-02-30"
    assert strict_spec(_yaml_spec("2024-02-30"), ROLES, LEVELS).spec == spec


def test_json_numbers_over_the_int_limit_are_spec_errors() -> None:
    text = '{"agents": [{"name": "a", "role": "math_solver", "capacity": "small", "duty": ' + "9" * 5_000 + "}]}"
    with pytest.raises(SpecError, match="duty"):
        load_spec(text, ROLES, LEVELS)
    assert strict_spec(text, ROLES, LEVELS).error is not None


def test_a_list_where_a_name_belongs_is_repaired_not_a_type_error() -> None:
    """The prompted orchestrator's repair path looked lists up in a dict and a set (TypeError)."""
    text = "agents:\n  - {name: a, role: [x, y], capacity: small}\noutput: [/bold]\n"
    spec, source, _ = spec_from_output(text, "2+2?", ROLES, LEVELS)
    assert source == "repaired" and spec.agents[0].role == "generalist" and spec.output == "a"


def test_spec_file_reads_are_bounded(tmp_path: Path) -> None:
    """A 300 MB spec is refused by size after reading MAX+1 bytes, not read whole."""
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(300 * 1024 * 1024)  # sparse: costs no disk
    with pytest.raises(SpecError, match="larger than"):
        read_spec_file(big)
    edge = tmp_path / "edge.yaml"
    edge.write_bytes(b"#" * MAX_SPEC_BYTES)
    assert len(read_spec_file(edge)) == MAX_SPEC_BYTES  # within the byte bound: the char bound decides next
    (tmp_path / "latin1.yaml").write_bytes("duty: caf\xe9".encode("latin-1"))
    with pytest.raises(SpecError, match="not UTF-8"):
        read_spec_file(tmp_path / "latin1.yaml")
    with pytest.raises(SpecError, match="is a folder, not a regular file"):
        read_spec_file(tmp_path)
    with pytest.raises(SpecError, match="does not exist"):
        read_spec_file(tmp_path / "nope.yaml")


# ---- the property -------------------------------------------------------------------------------------------

HOSTILE_SCALARS = st.sampled_from([
    "2024-02-30", "2024-02-29", "2001-12-14 21:59:43.10 -5", "yes", "No", "off", "~", "null", "true", "=",
    "1e999", "-.inf", ".NaN", "0x1F", "0o17", "0b101", "1_000", "190:20:30", "9" * 4_400, "-" + "9" * 4_400,
    "[/bold]", "[link=file:///etc/passwd]x[/link]", "[red]agent[/red]", "[/]", "\x1b[31mred", "tab\there",
    "!!python/object/apply:os.system ['true']", "!!timestamp 2024-02-30", "!!int 123", "!!binary AAAA",
    "&a x", "*a", "<<: *a", "!x y", "'quoted'", '"dq"', "{a: b}", "[1, 2]", "é̃", "\u2028", "\ufeff", "",
])
SCALARS = st.one_of(HOSTILE_SCALARS, st.text(max_size=40),
                    st.integers(min_value=4_000, max_value=5_000).map(lambda n: "7" * n))
FIELDS = ("name", "role", "capacity", "duty", "depends_on", "output")


@st.composite
def yaml_specs(draw: st.DrawFn) -> str:
    """A two-agent spec in YAML with hostile scalars put where fields belong (or in place of keys)."""
    values = {f: draw(st.one_of(st.just(None), SCALARS)) for f in FIELDS}
    key = draw(st.one_of(st.just("duty"), SCALARS))

    def field(f: str, default: str) -> str:
        return default if values[f] is None else values[f]

    return (f"agents:\n  - name: {field('name', 'first')}\n    role: {field('role', 'analyst')}\n"
            f"    capacity: {field('capacity', 'small')}\n    {key}: {field('duty', 'x')}\n"
            f"  - name: second\n    role: math_solver\n    capacity: large\n"
            f"    depends_on: [{field('depends_on', 'first')}]\noutput: {field('output', 'second')}\n")


@st.composite
def json_specs(draw: st.DrawFn) -> str:
    """A spec in JSON whose values may be raw number tokens (huge ints, NaN, 1e999) or hostile strings."""
    raw = st.sampled_from(["9" * 4_400, "NaN", "Infinity", "-1e999", "1.5", "true", "null", "[]", "{}"])
    value = draw(st.one_of(raw, SCALARS.map(json.dumps)))
    where = draw(st.sampled_from(FIELDS))
    agent = {"name": "a", "role": "math_solver", "capacity": "small", "duty": "d", "depends_on": []}
    body = json.dumps({"agents": [agent], "output": "a"}).replace(json.dumps(where) + ": ", "\0", 1)
    if "\0" not in body:
        return body
    head, tail = body.split("\0")
    tail = tail[tail.index(",") if "," in tail and where != "output" else tail.index("}"):]
    return f'{head}"{where}": {value}{tail}'


def _nested(depth: int, kind: str) -> str:
    return {"flow": "agents: " + "[" * depth + "]" * depth, "json": '{"a":' * depth + "1" + "}" * depth,
            "block": "".join("  " * i + "- \n" for i in range(depth)), "map": "".join("  " * i + f"k{i}:\n"
                                                                                      for i in range(depth))}[kind]


MUTATION_ALPHABET = st.sampled_from([*"[]{}:-&*!|>'\"#%@`,?\n\t \x00\x1b\x85\u2028\ufeff", "9" * 50])


@st.composite
def mutated_specs(draw: st.DrawFn) -> str:
    """A valid spec with random characters inserted, deleted or replaced."""
    text = list(_yaml_spec("Solve it.") + "  - {name: b, role: critic, capacity: large, depends_on: [solver]}\n")
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        at = draw(st.integers(min_value=0, max_value=len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        char = draw(MUTATION_ALPHABET)
        if op == "insert":
            text.insert(at, char)
        elif text and at < len(text):
            text[at:at + 1] = [] if op == "delete" else [char]
    return "".join(text)


ANY_SPEC_TEXT = st.one_of(
    yaml_specs(), json_specs(), mutated_specs(), st.text(max_size=300),
    st.builds(_nested, st.integers(min_value=1, max_value=MAX_SPEC_CHARS // 3),
              st.sampled_from(["flow", "json", "block", "map"])),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ANY_SPEC_TEXT)
def test_only_spec_error_ever_escapes(text: str) -> None:
    try:
        spec = load_spec(text, ROLES, LEVELS)
    except SpecError as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < 600
    else:
        assert all(isinstance(a.duty, str) and isinstance(a.name, str) for a in spec.agents)
    result = strict_spec(text, ROLES, LEVELS)
    assert (result.spec is None) == (result.error is not None)
    spec, source, _ = spec_from_output(text, "2+2?", ROLES, LEVELS)
    assert source in ("model", "repaired", "fallback") and spec.agents
