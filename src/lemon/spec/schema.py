"""A bounded JSON schema of a spec, for constrained decoding by an orchestrator model.

Bounds (maxItems, maxLength, name patterns, enums for roles and levels) are what keep a tiny model from
looping inside a string until max_tokens (models.md). The schema guarantees syntax, not meaning: graph
checks still run in `validate_spec`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lemon.spec.model import MAX_AGENTS, MAX_DUTY_LEN, MAX_NAME_LEN

# Printable ASCII without '"' and '\\': simple enough for every grammar converter, and within DUTY_PATTERN.
_SCHEMA_DUTY_PATTERN = r'^[ !#-\[\]-~]*$'
_SCHEMA_NAME_PATTERN = rf"^[a-z][a-z0-9_]{{0,{MAX_NAME_LEN - 1}}}$"


def spec_json_schema(role_names: Sequence[str], levels: Sequence[str], *, max_agents: int = MAX_AGENTS,
                     max_duty_len: int = MAX_DUTY_LEN) -> dict[str, Any]:
    """JSON schema for `{"agents": [...], "output": name}` restricted to `role_names` and `levels`."""
    name = {"type": "string", "pattern": _SCHEMA_NAME_PATTERN, "maxLength": MAX_NAME_LEN}
    agent = {
        "type": "object",
        "properties": {
            "name": name,
            "role": {"type": "string", "enum": list(role_names)},
            "duty": {"type": "string", "maxLength": max_duty_len, "pattern": _SCHEMA_DUTY_PATTERN},
            "capacity": {"type": "string", "enum": list(levels)},
            "depends_on": {"type": "array", "items": name, "maxItems": max_agents - 1},
        },
        "required": ["name", "role", "duty", "capacity", "depends_on"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "agents": {"type": "array", "items": agent, "minItems": 1, "maxItems": max_agents},
            "output": name,
        },
        "required": ["agents", "output"],
        "additionalProperties": False,
    }
