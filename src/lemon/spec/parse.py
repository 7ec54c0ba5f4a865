"""Text -> `Spec`: safe YAML (or JSON), with hostile input rejected before any real work.

Order matters: the size bound is checked before the parser sees the text (and a file is never read past
that bound), anchors, aliases and explicit tags are refused while composing (so a "billion laughs" document
never expands and `!!python/...` or `!!timestamp` builds nothing), and every scalar is read as a string.

Why strings: a spec holds only names, roles, levels and duties. YAML's implicit typing would turn the duty
`2024-02-30` into a date (and fail: no such day), `yes` into a bool, a 5,000-digit duty into an int over
Python's 4,300-digit conversion limit (ValueError); JSON numbers hit the same limit. Read as strings, such
input is either a valid duty or a one-line `SpecError` from the schema, never another exception. Only
`null`/`~`/empty keep their meaning (`depends_on:` with nothing after it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from lemon.errors import SpecError
from lemon.files import read_regular
from lemon.spec.copies import expand_copies
from lemon.spec.model import MAX_SPEC_CHARS, Spec, StopRule
from lemon.spec.stops import criteria

_PLAIN_TAGS = frozenset({None, "!", "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"})
# spec -> agents -> agent -> depends_on -> name is 4 deep; anything far deeper is hostile.
MAX_YAML_DEPTH = 16
# Flow brackets outside quoted strings, checked before parsing (generous: a duty may hold a few).
MAX_BRACKET_DEPTH = 64
_BRACKET = re.compile(r"[\[\]{}]")
_DOUBLE_QUOTED = re.compile(r'"[^"\n]*"')
# A spec file is UTF-8; no valid spec needs more than 4 bytes per character.
MAX_SPEC_BYTES = 4 * MAX_SPEC_CHARS


class _SpecLoader(yaml.SafeLoader):
    """A SafeLoader that refuses anchors, aliases and explicit tags, and resolves every plain scalar to a
    string except null: a spec needs none of the rest, and they are how YAML bombs and type confusion work."""

    yaml_implicit_resolvers: dict[Any, Any] = {}  # noqa: RUF012 (PyYAML's per-class registry, filled once below)

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        mark = event.start_mark
        if self._depth >= MAX_YAML_DEPTH:  # stop at once: composing 10,000 nested '[' takes seconds
            raise SpecError(f"spec nests too deeply (line {mark.line + 1}); a spec is a flat list of agents")
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise SpecError(
                f"YAML anchors/aliases are not allowed in a spec (line {mark.line + 1}); write the values out"
            )
        tag = getattr(event, "tag", None)
        if tag not in _PLAIN_TAGS:
            raise SpecError(f"malformed YAML at line {mark.line + 1}: tag {_one_line(tag)[:60]!r} is not allowed "
                            "in a spec; write plain values")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_SpecLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"),
                                  ["~", "n", "N", ""])


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _shown(value: str, limit: int = 40) -> str:
    """A value from the input as it appears in an error: quoted, one line, bounded (it may be 30 kB)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _bracket_depth(text: str) -> int:
    """How deep `[`/`{` nest outside double-quoted strings: PyYAML's scanner looks ahead over a whole run of
    open flow brackets (a 20 kB run takes seconds), so a deep one is refused before parsing."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_DOUBLE_QUOTED.sub("", text)):
        depth = depth + 1 if m.group() in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def load_data(text: str) -> Any:
    """Decode spec text (JSON or safe YAML, bounded) into plain Python data; raises `SpecError`."""
    if not isinstance(text, str):
        raise SpecError(f"a spec must be text, got {type(text).__name__}")
    if len(text) > MAX_SPEC_CHARS:
        raise SpecError(f"spec is {len(text):,} characters, more than the bound of {MAX_SPEC_CHARS:,}; "
                        "a spec has at most a dozen short agents")
    if not text.strip():
        raise SpecError("spec is empty; expected a mapping with 'agents' (and optionally 'output')")
    if _bracket_depth(text) > MAX_BRACKET_DEPTH:
        raise SpecError("spec nests too deeply; a spec is a flat list of agents")
    try:
        if text.lstrip().startswith("{"):
            try:  # numbers stay text: no int-size limit, no NaN; the schema wants strings anyway
                return json.loads(text, parse_int=str, parse_float=str, parse_constant=str)
            except json.JSONDecodeError:
                pass  # YAML flow mappings also start with '{'
        return yaml.load(text, Loader=_SpecLoader)
    except SpecError:
        raise
    except yaml.MarkedYAMLError as exc:
        where = f" at line {exc.problem_mark.line + 1}" if exc.problem_mark else ""
        raise SpecError(f"malformed YAML{where}: {_one_line(exc.problem or exc.context or 'syntax error')}; "
                        "check indentation and quoting") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"malformed YAML: {_one_line(exc)}") from None
    except RecursionError:
        raise SpecError("spec nests too deeply; a spec is a flat list of agents") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a constructor's own failure; never expected
        raise SpecError(f"spec cannot be read: {_one_line(exc)[:200]}") from None


def read_spec_file(path: Path) -> str:
    """A spec file's text through the one guarded opener (`lemon.files.read_regular`): a regular file only (a
    FIFO given as SPEC hung `lemon validate` and `lemon exec` forever; a device never ended), at most
    `MAX_SPEC_BYTES` read (a 300 MB file is refused by its size; the character bound of `load_data` then
    applies to the text), UTF-8."""
    data = read_regular(path, limit=MAX_SPEC_BYTES, what="spec file", error=SpecError,
                        size_hint=f"a spec has at most {MAX_SPEC_CHARS:,} characters")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"spec file {path} is not UTF-8 text ({exc.reason}); a spec has at most "
                        f"{MAX_SPEC_CHARS:,} characters of YAML or JSON") from None


def describe_validation_error(exc: ValidationError, data: Any, index: int = 0) -> str:
    """The `index`-th (default: first) pydantic error as one line that names the agent and the field."""
    err = exc.errors()[index]
    loc = list(err["loc"])
    where = "spec"
    if len(loc) >= 2 and loc[0] == "agents" and isinstance(loc[1], int):
        idx = loc[1]
        name = None
        agents = data.get("agents") if isinstance(data, dict) else None
        if isinstance(agents, list) and idx < len(agents) and isinstance(agents[idx], dict):
            name = agents[idx].get("name")
        where = f"agent {idx + 1}" + (f" ({_shown(name)})" if isinstance(name, str) else "")
        field = ".".join(str(p) for p in loc[2:]) or "agent"
    else:
        field = ".".join(str(p) for p in loc) or "spec"
    msg = err["msg"]
    if err["type"] == "string_pattern_mismatch" and loc and loc[-1] != "duty":
        msg = "must be lower_snake_case: a letter, then letters, digits or '_' (at most 24 characters)"
    elif err["type"] == "string_pattern_mismatch":
        msg = "must be one line without double quotes, backslashes or control characters"
    elif err["type"] == "extra_forbidden" and loc[2:3] == ["stop"]:  # a stop rule's own fields, not an agent's
        msg = f"unknown field; allowed in stop: {', '.join(stop_keys())}"
    elif err["type"] == "extra_forbidden":
        msg = ("unknown field; allowed: name, copies, role, duty, capacity, depends_on, stop (agents), agents, "
               "output (spec)")
    elif err["type"] == "too_long" and loc == ["agents"]:
        msg = f"{msg}; split the task or use fewer agents"
    return f"{where}, field {field}: {_one_line(msg)[:200]}"


def spec_data(text: str) -> dict[str, Any]:
    """Spec text as the mapping the schema checks (YAML/JSON read under the bounds, blank fields normalised)."""
    data = load_data(text)
    if not isinstance(data, dict):
        raise SpecError(f"a spec must be a mapping with 'agents', got {type(data).__name__}")
    if isinstance(data.get("agents"), list):
        # Normalise the one ambiguity of hand-written YAML: `depends_on:` with nothing after it is null.
        for a in data["agents"]:
            if isinstance(a, dict) and a.get("depends_on", ()) is None:
                a["depends_on"] = []
            if isinstance(a, dict) and a.get("duty", "") is None:
                a["duty"] = ""
    return expand_copies(data)


def parse_spec(text: str) -> Spec:
    """Parse spec text into a `Spec` (schema and bounds checked; graph checks are in `validate`)."""
    data = spec_data(text)
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(exc, data)) from None


def stop_keys() -> list[str]:
    """The keys a stop rule may hold, in its dump's order: the first rules' criteria, the modifiers, the rest
    of the registered criteria."""
    first = [c.key for c in criteria() if c.always_dumped]
    return [*first, *StopRule.model_fields, *(c.key for c in criteria() if not c.always_dumped)]
