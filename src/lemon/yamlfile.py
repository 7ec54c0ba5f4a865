"""Reading LEMON's own YAML data files (roles, prompts, pools, configs) with PyYAML's safe loader.

libyaml's C loader (`CSafeLoader`) is used when PyYAML was built with it: it is 4-5x faster than the pure
Python one, which matters because every evaluation and every `lemon` command reads these files at start-up.
Model-written specs do NOT come through here: `lemon.spec.parse` has its own loader that refuses aliases.
"""

from __future__ import annotations

from typing import Any

import yaml

_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """Parse trusted YAML text safely (no `!!python` tags); raises `yaml.YAMLError` on bad syntax."""
    return yaml.load(text, Loader=_LOADER)
