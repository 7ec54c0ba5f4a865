"""MkDocs hook: the reference pages, generated from the code at build time, so they cannot drift from it.

- `reference/cli.md`: every `lemon` command and option, from the typer app itself (typer's own Markdown
  generator, the one behind `typer MODULE utils docs`, called in-process so an import error fails the build
  instead of leaving an empty page).
- `reference/spec.md`: the spec format, from the pydantic models' JSON schema (`Spec`, `Agent`, `StopRule`),
  the role library (`lemon/spec/roles/*.yaml`) and the bounded schema a prompted orchestrator writes under
  (`spec_json_schema`).
- `reference/pool.md`: the pool file format, from `PoolConfig`'s JSON schema.

Nothing here touches the network: the build runs offline.
"""

from __future__ import annotations

import json
from typing import Any

import typer
import typer.cli
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from lemon.cli.main import app
from lemon.llm.pools import PoolConfig, pool_level_names
from lemon.spec.model import Spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.schema import spec_json_schema

GENERATED = "Generated at build time by `docs/hooks/reference.py` from the code; edit the code, not this page."
_BOUNDS = (("minimum", ">= {}"), ("exclusiveMinimum", "> {}"), ("maximum", "<= {}"), ("exclusiveMaximum", "< {}"),
           ("minLength", "length >= {}"), ("maxLength", "length <= {}"), ("minItems", ">= {} items"),
           ("maxItems", "<= {} items"), ("pattern", "pattern `{}`"))


def cli_page() -> str:
    """Every command of the `lemon` app with its arguments and options, as typer documents them."""
    command = typer.main.get_command(app)
    ctx = typer.Context(command, info_name="lemon")
    body = typer.cli.get_docs_for_click(obj=command, ctx=ctx, name="lemon", title="CLI reference")
    return f"{body.strip()}\n\n*{GENERATED}*\n"


def _type_of(prop: dict[str, Any]) -> str:
    """A JSON-schema property's type in a few words (`string`, `array of Agent`, `StopRule or null`)."""
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in prop:
        return " or ".join(_type_of(p) for p in prop["anyOf"])
    if prop.get("type") == "array":
        return f"array of {_type_of(prop.get('items', {}))}"
    if "enum" in prop:
        return "one of " + ", ".join(f"`{v}`" for v in prop["enum"])
    return str(prop.get("type", "any"))


def _bounds_of(prop: dict[str, Any]) -> str:
    parts = [fmt.format(prop[key]) for key, fmt in _BOUNDS if key in prop]
    for option in prop.get("anyOf", []):
        parts += [fmt.format(option[key]) for key, fmt in _BOUNDS if key in option]
    return "; ".join(p.replace("|", "\\|") for p in parts)


def fields_table(schema: dict[str, Any]) -> str:
    """One row per property: name, type, required or default, bounds, description."""
    required = set(schema.get("required", []))
    rows = ["| field | type | required / default | bounds | what it is |", "|---|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        if name in required:
            default = "required"
        else:  # a default built by a factory (a nested model) has no value in the schema
            default = f"`{json.dumps(prop['default'])}`" if "default" in prop else "optional (its own defaults)"
        description = " ".join(str(prop.get("description", "")).split())
        rows.append(f"| `{name}` | {_type_of(prop)} | {default} | {_bounds_of(prop)} | {description} |")
    return "\n".join(rows)


def models_section(schema: dict[str, Any]) -> list[str]:
    """A heading, the docstring's first paragraph and the fields table for the model and each of its $defs."""
    out = []
    for name, model in [(schema.get("title", "model"), schema), *schema.get("$defs", {}).items()]:
        summary = str(model.get("description", "")).split("\n\n")[0]
        out += [f"## {name}", ""] + ([" ".join(summary.split()), ""] if summary.strip() else [])
        out += [fields_table(model), ""]
    return out


def roles_table() -> str:
    roles = RoleLibrary.load()
    rows = ["| role | kind | what it does |", "|---|---|---|"]
    rows += [f"| `{n}` | {roles[n].kind} | {' '.join(roles[n].description.split())} |" for n in roles.names]
    return "\n".join(rows)


def spec_page() -> str:
    """The spec format: the models' fields, the role library, and the orchestrator's bounded JSON schema."""
    roles = RoleLibrary.load()
    levels = pool_level_names("cpu")
    bounded = json.dumps(spec_json_schema(roles.llm_role_names(), levels), indent=2)
    lines = ["# Spec reference", "",
             "A spec is YAML or JSON (`lemon validate SPEC` prints its canonical form). The fields below come from",
             "the pydantic models in `lemon.spec.model`; the prose on the format, stop rules and copies is in",
             "[Specs](../specs.md).", "", *models_section(Spec.model_json_schema()),
             "## The role library", "", "Base roles (`lemon/spec/roles/*.yaml`): `llm` agents call a model, "
             "`program` agents write Python the sandbox runs, `vote` agents aggregate without a model call.", "",
             roles_table(), "",
             "## What a prompted orchestrator may write", "",
             f"`spec_json_schema(role_names, levels)` for the prose roles and the `cpu` pool's levels "
             f"({', '.join(levels)}): the bounded JSON schema the prompted orchestrator decodes under.", "",
             "```json", bounded, "```", "", f"*{GENERATED}*", ""]
    return "\n".join(lines)


def pool_page() -> str:
    lines = ["# Pool file reference", "",
             "A pool file maps capacity levels (weakest first) to models: `--pool FILE`. Examples and the",
             "endpoint settings in prose: [Pools and endpoints](../pools.md).", "",
             *models_section(PoolConfig.model_json_schema()), f"*{GENERATED}*", ""]
    return "\n".join(lines)


PAGES = {"reference/cli.md": cli_page, "reference/spec.md": spec_page, "reference/pool.md": pool_page}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """MkDocs event: add the generated pages to the site."""
    for path, make in PAGES.items():
        files.append(File.generated(config, path, content=make()))
    return files
