"""docs/architecture.md is a contract: every name it shows in code formatting exists in the code, checked here.

What is checked, from the source with `ast` (and imports only for dotted `lemon.` paths):
- every dotted path `lemon.x.y` resolves (module, then attributes);
- every call form `name(a, b, *, c=...)` names a function or class defined in LEMON, and every argument it lists
  is a parameter (or, for a class, a field) of one definition of that name: a renamed or a missing argument
  (`spec_json_schema(roles, ...)` for `role_names`, `Executor.run` without `shared_budget`) fails;
- every span that is one identifier (`sample_slot`, `RunResult`, `budget_scope`) is defined somewhere in LEMON
  (a function, class, method, field, assignment or parameter), or is a string the code uses (`LEMON_HOME`);
- every file or folder it names (`rerun.py`, `view/`, `prompts/teams.yaml`) exists in the section's package, in
  the package, or in the repository;
- the README's architecture block lists exactly the package's folders, in the order of the layers.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

from tests.test_structure import LAYERS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "lemon"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DOTTED = re.compile(r"\blemon(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


@cache
def trees() -> tuple[ast.Module, ...]:
    return tuple(ast.parse(p.read_text("utf-8")) for p in sorted(PACKAGE.rglob("*.py")))


@cache
def definitions() -> dict[str, set[str]]:
    """name -> the parameter and field names of every function or class of that name (empty for others)."""
    found: dict[str, set[str]] = {}
    for tree in trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
                found.setdefault(node.name, set()).update(a.arg for a in params if a is not None)
            elif isinstance(node, ast.ClassDef):
                fields = {t.target.id for t in node.body
                          if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
                init = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
                for f in init:
                    fields.update(a.arg for a in [*f.args.args, *f.args.kwonlyargs])
                found.setdefault(node.name, set()).update(fields)
    return found


@cache
def names() -> frozenset[str]:
    """Every name LEMON defines or binds (functions, classes, fields, assignments, attributes, parameters) and
    every string constant it uses; module and folder names too (`runtime.rerun`)."""
    out: set[str] = set(definitions())
    out |= {p.stem for p in PACKAGE.rglob("*.py")} | {p.name for p in PACKAGE.rglob("*") if p.is_dir()}
    for params in definitions().values():
        out |= params
    for tree in trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Name | ast.arg):
                out.add(node.id if isinstance(node, ast.Name) else node.arg)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                out.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 80:
                out.add(node.value)
    return frozenset(out)


def spans(text: str) -> list[tuple[str, str]]:
    """(section package, code span) for every `code` span of a markdown text (a span may cross a line break);
    fenced blocks are skipped."""
    out = []
    for block in re.split(r"^```.*?^```", text, flags=re.MULTILINE | re.DOTALL):
        headings = [(m.start(), m.group(1)) for m in re.finditer(r"^#+\s+lemon\.(\w+)", block, re.MULTILINE)]
        for m in re.finditer(r"`([^`]+)`", block):
            section = next((name for at, name in reversed(headings) if at < m.start()), "")
            out.append((section, " ".join(m.group(1).split())))
    return out


def _split_args(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def calls(span: str) -> list[tuple[str, list[str]]]:
    """(name, argument names) of every call form `name(...)` in `span`, nested ones included."""
    out = []
    for m in re.finditer(r"([A-Za-z_][\w.]*)\(", span):
        depth, end = 1, m.end()
        while end < len(span) and depth:
            depth += {"(": 1, ")": -1}.get(span[end], 0)
            end += 1
        inner = span[m.end(): end - 1]
        args = []
        for part in _split_args(inner):
            head = re.split(r"[=:\[]| (?![|])", part.strip().lstrip("*/").strip(), maxsplit=1)[0]
            args.extend(a.strip() for a in head.split("|") if IDENT.fullmatch(a.strip()))
        out.append((m.group(1).rsplit(".", 1)[-1], args))
    return out


def call_problems(span: str) -> list[str]:
    problems = []
    for name, args in calls(span):
        if name not in definitions():
            problems.append(f"{name}() is defined nowhere in lemon")
            continue
        missing = [a for a in args if a not in definitions()[name]]
        if missing:
            problems.append(f"{name}() has no parameter or field {', '.join(missing)}")
    return problems


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def path_exists(section: str, span: str) -> bool:
    rel = span.rstrip("/")
    candidates = [ROOT / rel, PACKAGE / rel, PACKAGE / section / rel]
    return any(c.exists() for c in candidates) or any(PACKAGE.rglob(rel))


def problems_of(section: str, span: str) -> list[str]:
    span = span.strip()
    out = [f"{d} does not resolve" for d in DOTTED.findall(span) if not resolves(d)]
    if re.fullmatch(r"[\w./-]+\.(py|yaml|md|html)|[\w-]+/", span):
        return out + ([] if path_exists(section, span) else [f"{span}: no such file or folder"])
    if "(" in span:
        return out + call_problems(span)
    words = span.split(".")
    if all(IDENT.fullmatch(w) for w in words) and not DOTTED.fullmatch(span):
        out += [f"{w} is defined nowhere in lemon" for w in words if w not in names()]
    return out


def test_the_checks_can_fail() -> None:
    assert call_problems("spec_json_schema(roles, levels)") == ["spec_json_schema() has no parameter or field roles"]
    assert call_problems("Executor.run(spec, task, *, seed=0, shared_budget=None)") == []
    assert call_problems("Spec(agents, output, wishes)") == ["Spec() has no parameter or field wishes"]
    assert problems_of("", "no_such_function()") == ["no_such_function() is defined nowhere in lemon"]
    assert problems_of("", "lemon.bench.tasks") == ["lemon.bench.tasks does not resolve"]
    assert problems_of("runtime", "rerun.py") == [] and problems_of("runtime", "gone.py") != []
    assert problems_of("", "sample_slot") == [] and problems_of("", "sample_slots_of_old") != []


def test_every_name_docs_architecture_cites_exists() -> None:
    problems = [f"`{span}`: {p}" for section, span in spans(ARCHITECTURE.read_text("utf-8"))
                for p in problems_of(section, span)]
    assert not problems, "docs/architecture.md cites what the code lacks:\n" + "\n".join(problems)


def _block_packages(text: str) -> list[str]:
    block = re.search(r"```\n(lemon\.spec.*?)```", text, re.DOTALL)
    assert block, "no architecture block starting with lemon.spec"
    return re.findall(r"lemon\.(\w+)", block.group(1))


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_the_architecture_block_lists_the_folders_in_layer_order(doc: str) -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert _block_packages((ROOT / doc).read_text("utf-8")) == list(LAYERS)
    assert set(LAYERS) == folders
