"""Text -> `Spec`: safe YAML (or JSON), with hostile input rejected before any real work.

Order matters: the size bound is checked before the parser sees the text, anchors and aliases are refused
while composing (so a "billion laughs" document never expands), and only plain data types are constructed
(`yaml.SafeLoader`: a `!!python/...` tag is an error, not an object).
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from pydantic import ValidationError

from lemon.errors import SpecError
from lemon.spec.model import MAX_SPEC_CHARS, Spec


class _NoAliasLoader(yaml.SafeLoader):
    """A SafeLoader that refuses anchors and aliases: a spec never needs them, and they are how YAML bombs work."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            mark = event.start_mark
            raise SpecError(
                f"YAML anchors/aliases are not allowed in a spec (line {mark.line + 1}); write the values out"
            )
        return super().compose_node(parent, index)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def load_data(text: str) -> Any:
    """Decode spec text (JSON or safe YAML, bounded) into plain Python data; raises `SpecError`."""
    if not isinstance(text, str):
        raise SpecError(f"a spec must be text, got {type(text).__name__}")
    if len(text) > MAX_SPEC_CHARS:
        raise SpecError(f"spec is {len(text):,} characters, more than the bound of {MAX_SPEC_CHARS:,}; "
                        "a spec has at most a dozen short agents")
    if not text.strip():
        raise SpecError("spec is empty; expected a mapping with 'agents' (and optionally 'output')")
    try:
        if text.lstrip().startswith("{"):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                pass  # YAML flow mappings also start with '{'
        return yaml.load(text, Loader=_NoAliasLoader)
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


def describe_validation_error(exc: ValidationError, data: Any) -> str:
    """The first pydantic error as one line that names the agent and the field."""
    err = exc.errors()[0]
    loc = list(err["loc"])
    where = "spec"
    if len(loc) >= 2 and loc[0] == "agents" and isinstance(loc[1], int):
        idx = loc[1]
        name = None
        agents = data.get("agents") if isinstance(data, dict) else None
        if isinstance(agents, list) and idx < len(agents) and isinstance(agents[idx], dict):
            name = agents[idx].get("name")
        where = f"agent {idx + 1}" + (f" ({name!r})" if isinstance(name, str) else "")
        field = ".".join(str(p) for p in loc[2:]) or "agent"
    else:
        field = ".".join(str(p) for p in loc) or "spec"
    msg = err["msg"]
    if err["type"] == "string_pattern_mismatch" and loc and loc[-1] != "duty":
        msg = "must be lower_snake_case: a letter, then letters, digits or '_' (at most 24 characters)"
    elif err["type"] == "string_pattern_mismatch":
        msg = "must be one line without double quotes, backslashes or control characters"
    elif err["type"] == "extra_forbidden":
        msg = "unknown field; allowed: name, role, duty, capacity, depends_on (agents), agents, output (spec)"
    elif err["type"] == "too_long" and loc == ["agents"]:
        msg = f"{msg}; split the task or use fewer agents"
    return f"{where}, field {field}: {_one_line(msg)}"


def parse_spec(text: str) -> Spec:
    """Parse spec text into a `Spec` (schema and bounds checked; graph checks are in `validate`)."""
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
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(exc, data)) from None
