"""The package's shape, checked from the source with `ast` (nothing is imported, so a cycle cannot hide behind a lazy
import): imports flow one way, spec -> llm -> sandbox -> runtime -> orchestrator -> benchmarks -> evaluation ->
train -> inspection -> api, cli on top (the package root re-exports the api layer: its public face), with no
cycle between modules; no function is longer than 60 lines; the evaluation's unit of work has no `Any`."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

import lemon

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = ("spec", "llm", "sandbox", "runtime", "orchestrator", "benchmarks", "evaluation", "train", "inspection",
          "api", "cli")
# Leaf modules anyone may import (they import nothing of LEMON but lemon.errors; `lemon.extract`: the pure answer
# extractors, which the answer kinds of `lemon.orchestrator.kinds` hold; `lemon.registry`: the registries' one class).
LEAVES = {"lemon", "lemon.errors", "lemon.extract", "lemon.files", "lemon.paths", "lemon.registry", "lemon.seeds",
          "lemon.sqlitefile", "lemon.yamlfile"}
MAX_LINES = 60
# The package root is a leaf (LemonError, __version__) that is also the public face: it re-exports the API layer,
# imported lazily on first use of one of its names (issue 53), and nothing else above the leaves.
FACE = {"lemon": {"lemon.api"}}

KNOWN_CYCLES: set[frozenset[str]] = set()  # none left: the CLI's consoles live in lemon.cli.options (issue 14)
KNOWN_LONG: set[str] = set()  # none left: the trainer command's settings are dotted overrides (issue 22)


@cache
def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "lemon").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


@cache
def tree(name: str) -> ast.Module:
    return ast.parse(modules()[name].read_text("utf-8"), filename=str(modules()[name]))


def imports(name: str) -> set[str]:
    """Every LEMON module `name` imports, at module level or inside a function (`from pkg import mod` -> mod)."""
    mods = modules()
    package = name if mods[name].name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            out.update(imported(base, a.name) for a in node.names)
    return {m for m in out if m in mods and m != name}


def imported(base: str, name: str) -> str:
    """The module `from base import name` imports: `base.name` if a module, else `base`; an API name through
    the face (`from lemon import run`) is an import of the API layer."""
    if f"{base}.{name}" in modules():
        return f"{base}.{name}"
    return "lemon.api" if base == "lemon" and name in lemon.API else base


def layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_the_walk_sees_the_whole_package() -> None:
    assert {"lemon.evaluation.item", "lemon.evaluation.methods", "lemon.cli.main", "lemon.spec.model"} <= set(modules())
    assert "lemon.evaluation.item" in imports("lemon.evaluation.scale")  # lazy and module-level imports both count
    assert "lemon.orchestrator.template" in imports("lemon.evaluation.methods")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """The edges of `graph` (module -> modules it imports) that go up the layers or outside them."""
    upward = []
    for name, deps in graph.items():
        own = layer(name)
        for dep in sorted(deps - LEAVES - FACE.get(name, set())):
            dep_layer = layer(dep)
            if own is None or dep_layer is None:
                upward.append(f"{name} -> {dep} (only the leaves {sorted(LEAVES)} sit outside the layers)")
            elif dep_layer > own:
                upward.append(f"{name} -> {dep}")
    return upward


def test_an_upward_import_is_found() -> None:
    graph = {"lemon.spec.model": {"lemon.evaluation.item", "lemon.errors"},
             "lemon.evaluation.item": {"lemon.spec.model"}}
    assert upward_imports(graph) == ["lemon.spec.model -> lemon.evaluation.item"]


def test_the_api_through_the_face_is_an_import_of_the_api_layer() -> None:
    """`from lemon import run` below the API layer is an upward import like `from lemon.api import run`."""
    assert imported("lemon", "run") == "lemon.api" and imported("lemon", "__version__") == "lemon"
    assert imported("lemon", "spec") == "lemon.spec" and imported("lemon.spec", "model") == "lemon.spec.model"
    graph = {"lemon.evaluation.item": {"lemon.api"}}
    assert upward_imports(graph) == ["lemon.evaluation.item -> lemon.api"]


def test_no_upward_import() -> None:
    upward = upward_imports({name: imports(name) for name in modules()})
    assert not upward, "imports must flow " + " -> ".join(LAYERS) + ":\n" + \
        "\n".join(upward)


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm, iterative; the components with more than one module are the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_tarjan_finds_a_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_cycle() -> None:
    # The face's edge is lazy (`lemon.__getattr__`): `from lemon import __version__` below the API imports nothing.
    cycles = set(strongly_connected({name: imports(name) - FACE.get(name, set()) for name in modules()}))
    new = cycles - KNOWN_CYCLES
    assert not new, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in new)


def long_functions() -> dict[str, int]:
    out = {}
    for name in modules():
        for node in ast.walk(tree(name)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_LINES:
                    out[f"{name}.{node.name}"] = length
    return out


def test_no_function_is_longer_than_60_lines() -> None:
    new = {f: n for f, n in long_functions().items() if f not in KNOWN_LONG}
    assert not new, f"functions over {MAX_LINES} lines (split them into named steps): {new}"


@pytest.mark.parametrize("name", ["lemon.evaluation.item", "lemon.evaluation.methods", "lemon.evaluation.evaluate"])
def test_the_evaluation_unit_of_work_has_no_any(name: str) -> None:
    uses = [node.lineno for node in ast.walk(tree(name))
            if (isinstance(node, ast.Name) and node.id == "Any")
            or (isinstance(node, ast.Attribute) and node.attr == "Any")
            or (isinstance(node, ast.alias) and node.name == "Any")]
    # `from __future__ import annotations` keeps annotations as strings: read those too
    strings = [node.lineno for node in ast.walk(tree(name))
               if isinstance(node, ast.arg | ast.AnnAssign | ast.FunctionDef | ast.AsyncFunctionDef)
               and "Any" in ast.unparse(getattr(node, "annotation", None) or getattr(node, "returns", None)
                                        or ast.Constant(""))]
    assert not uses and not strings, f"{name} uses Any on lines {sorted(set(uses + strings))}"


# The kinds registered once (issue 53): answer kinds (`lemon.orchestrator.kinds`), role kinds
# (`lemon.spec.roles.ROLE_KINDS`) and stop criteria (`lemon.spec.stops`). Their names may be compared only in
# their registry's modules; everyone else asks the kind object what it does.
KIND_NAMES = {"number", "choice", "code", "llm", "program", "vote", "agree", "confidence", "logprob", "examples"}
KIND_HOMES = {"lemon.orchestrator.kinds", "lemon.spec.roles"}


def _mentions_kind(node: ast.expr) -> bool:
    """An expression that reads a kind: a name or attribute called `kind` or ending in `_kind`, or a `.key`."""
    return any((isinstance(n, ast.Name) and (n.id == "kind" or n.id.endswith("_kind")))
               or (isinstance(n, ast.Attribute) and (n.attr in ("kind", "key") or n.attr.endswith("_kind")))
               for n in ast.walk(node))


def kind_comparisons(module: ast.Module) -> list[int]:
    """Lines that compare a kind with a kind's name as a string (`role.kind == "vote"`, `kind in ("number",)`)."""
    found = []
    for node in ast.walk(module):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = {c.value for s in sides for c in ast.walk(s)
                 if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        if names & KIND_NAMES and any(_mentions_kind(s) for s in sides):
            found.append(node.lineno)
    return found


def test_a_kind_comparison_is_found() -> None:
    module = ast.parse('if role.kind == "vote": pass\nif kind in ("number", "choice"): pass\nif model != "vote": pass')
    assert kind_comparisons(module) == [1, 2]


def test_no_string_comparison_on_a_kind_outside_its_registry() -> None:
    found = {name: lines for name in modules() if not name.startswith("lemon.spec.stops") and name not in KIND_HOMES
             and (lines := kind_comparisons(tree(name)))}
    assert not found, f"compare kinds through their objects (issue 53), not by name: {found}"
