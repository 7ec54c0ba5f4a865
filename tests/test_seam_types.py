"""No `Any` in the public signatures of the seams between the runtime, evaluation and training (issue 22).

A seam is where one part hands data to another: the runtime's results and trace records (what evaluation and
training read), the orchestrator interface and its resolver, the benchmark interface, the evaluation harness and its
results store (its rows: `ItemRow`, `RunInfo`), the trainer's tasks, rollout, batch, settings,
update and run-folder rows, the public API (`lemon.api`: `lemon.run` and the rest) and the `lemon run` session.
Their public functions and methods, and the fields of their public classes, must name their types: trace events,
token records and stop decisions are TypedDicts, the trainer's rows (`samples.jsonl`) a TypedDict, models and
optimizers torch's own classes.

Left out, on purpose: the modules that wrap third-party objects typed only at run time (`train.generation`,
`train.policy_handle`, `train.distributed`: HF models and tokenizers, accelerate's engine) and readers of
free-form files (`train.plot`). The evaluation harness's unit of work (`evaluation.item`, `evaluation.methods`,
`evaluation.evaluate`) is held to no `Any` at all by `test_structure.py`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

SEAMS = (
    "lemon.runtime.executor", "lemon.runtime.trace", "lemon.runtime.rerun", "lemon.runtime.budget",
    "lemon.runtime.node_cache", "lemon.runtime.stop_rules",
    "lemon.orchestrator.base", "lemon.orchestrator.resolve",
    "lemon.benchmarks.base", "lemon.evaluation.item", "lemon.evaluation.methods", "lemon.evaluation.evaluate",
    "lemon.evaluation.store",
    "lemon.train.tasks", "lemon.train.rollout", "lemon.train.batch", "lemon.train.settings", "lemon.train.metrics",
    "lemon.train.workers", "lemon.train.update", "lemon.train.accumulate", "lemon.train.microbatch",
    "lemon.train.checkpoint", "lemon.train.grpo",
    "lemon.api.session", "lemon.api.spec", "lemon.cli.session",
)


def _path(module: str) -> Path:
    base = SRC.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _mentions_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)
    return any(word == "Any" for word in _words(text))


def _words(text: str) -> list[str]:
    out, cur = [], ""
    for ch in text:
        if ch.isalnum() or ch == "_":
            cur += ch
        else:
            out.append(cur)
            cur = ""
    return [*out, cur]


def _function(fn: ast.FunctionDef | ast.AsyncFunctionDef, owner: str) -> list[str]:
    if fn.name.startswith("_") and fn.name != "__init__":
        return []
    a = fn.args
    args = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x is not None)]
    bad = [x.arg for x in args if _mentions_any(x.annotation)] + (["return"] if _mentions_any(fn.returns) else [])
    return [f"{owner}{fn.name}({b}):{fn.lineno}" for b in bad]


def public_any(source: str) -> list[str]:
    """The public signatures (functions, methods, class fields, type aliases) of `source` that name `Any`."""
    found: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += _function(node, "")
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                    found += _function(sub, f"{node.name}.")
                elif isinstance(sub, ast.AnnAssign) and _mentions_any(sub.annotation):
                    found.append(f"{node.name}.{ast.unparse(sub.target)}:{sub.lineno}")
        elif isinstance(node, ast.Assign | ast.AnnAssign) and _mentions_any(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [ast.unparse(t) for t in targets]
            if any(n[:1].isupper() for n in names):  # a public type alias (EventHook = Callable[...])
                found.append(f"{', '.join(names)}:{node.lineno}")
    return found


def test_the_check_finds_any_where_it_hides() -> None:
    source = '''
from typing import Any
Hook = Callable[[dict[str, Any]], None]
def f(x: "dict[str, Any]") -> int: ...
def g(*, y: int) -> list[Any]: ...
def _private(x: Any) -> Any: ...
class C:
    field: Any
    def m(self, **kw: Any) -> None: ...
    def _p(self, x: Any) -> None: ...
class _Hidden:
    field: Any
def ok(x: AnyStr, y: "Anything") -> None: ...
'''
    assert public_any(source) == ["Hook:3", "f(x):4", "g(return):5", "C.field:8", "C.m(kw):9"]


@pytest.mark.parametrize("module", SEAMS)
def test_no_any_in_the_public_signatures_of_a_seam(module: str) -> None:
    found = public_any(_path(module).read_text("utf-8"))
    assert not found, f"{module}: Any in public signatures (name the type): {found}"
