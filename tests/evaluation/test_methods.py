"""The Method seam: every `--method` value resolves to an object that knows its name and identity and writes
specs; nothing outside `evaluation/methods.py` dispatches on method names."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from lemon.errors import LemonError
from lemon.evaluation import baselines
from lemon.evaluation.methods import Baseline, MethodEnv, Trained, method_help, method_names, resolve_method
from lemon.spec.grammar import grammar_identity
from lemon.spec.roles import RoleLibrary
from tests.pools import LEVELS, scripted_pool

SRC = Path(__file__).resolve().parents[2] / "src" / "lemon"
BASELINES = baselines.method_names()


def test_the_table_lists_every_baseline_then_the_orchestrators() -> None:
    assert method_names() == (*baselines.method_names(), "template", "prompted", "trained:PATH",
                              "unconstrained:PATH")
    # the CLI help is the table's, word for word what it was when it was hard-coded
    assert method_help() == ("vanilla, cot, sc-cot, esc, asc, gate, cges, exsc, pot, sc-pot, pot-esc, mixed-esc, "
                             "cross-check, chain, tree, complete, random, template (the default orchestration), "
                             "prompted, trained:PATH, or unconstrained:PATH (a trained policy decoding without the "
                             "spec grammar).")


@pytest.mark.parametrize("value", [*BASELINES, "template", "prompted", "trained:some/dir", "trained:C:\\m.gguf",
                                   "unconstrained:some/dir"])
def test_every_valid_value_resolves_to_a_method_named_as_given(value: str) -> None:
    method = resolve_method(value)
    assert method.name == value  # the name goes into the run id: it must be the value as typed
    assert pickle.loads(pickle.dumps(method)) == method  # it travels to Ray workers


@pytest.mark.parametrize("value", ["magic", "trained", "trained:", "cot:x", "prompted:x", "", "Vanilla"])
def test_an_unknown_value_is_one_line_listing_the_valid_ones(value: str) -> None:
    with pytest.raises(LemonError, match=r"^unknown method .*; valid: vanilla, cot, .*trained:PATH$"):
        resolve_method(value)


def test_only_orchestrators_have_an_identity_beyond_their_name(tmp_path: Path) -> None:
    """A baseline's name is its identity; the template's teams are its own, and every orchestrator that may fall
    back runs them in place of unusable output, so a change of the teams (or of the fallback, 2026-11-27) starts
    a new run instead of resuming one drawn under the old ones."""
    assert all(resolve_method(v).identity() is None for v in BASELINES)
    teams = str(resolve_method("template").identity())
    assert teams.startswith("teams:")  # a new team is a new run
    assert resolve_method("prompted").identity() == f"fallback={teams}"
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"w")
    assert isinstance(resolve_method(f"trained:{tmp_path}"), Trained)
    policy = str(resolve_method(f"trained:{tmp_path}").identity())
    # decoding under the spec grammar is part of what the runs measure (issue 55): the grammar is in the identity
    assert policy.startswith("policy:") and policy.endswith(f";fallback={teams};{grammar_identity()}")
    free = str(resolve_method(f"unconstrained:{tmp_path}").identity())
    assert free == policy.removesuffix(f";{grammar_identity()}")


def _env(kind: str = "number", n_agents: int | None = None, level: str = "small") -> MethodEnv:
    from lemon.llm.scripted import ScriptedBackend

    return MethodEnv(pool=scripted_pool(ScriptedBackend("s")), roles=RoleLibrary.load(), kind=kind, level=level,
                     n_agents=n_agents)


async def test_a_baseline_writes_its_fixed_spec_and_random_draws_its_graph_from_the_seed() -> None:
    cot = await resolve_method("cot").bind(_env()).write("task", seed=1)
    assert cot.proposal is None and [a.name for a in cot.spec.agents] == ["solver"]
    writer = Baseline("random").bind(_env(n_agents=5))
    graphs = {tuple((a.name, a.depends_on) for a in (await writer.write("t", seed=s)).spec.agents) for s in range(8)}
    assert len(graphs) > 1  # the seed draws the graph...
    again = await writer.write("t", seed=3)
    assert again.spec == (await writer.write("t", seed=3)).spec  # ...deterministically


def test_a_bad_baseline_size_fails_when_bound_before_any_item() -> None:
    with pytest.raises(LemonError, match="n must be in"):
        Baseline("sc-cot").bind(_env(n_agents=99))


async def test_template_wraps_its_orchestrator_and_reserves_nothing() -> None:
    from lemon.runtime.budget import TokenLedger

    ledger = TokenLedger(10, "eval")
    written = await resolve_method("template").bind(_env()).write("What is 2 + 3?", seed=0, ledger=ledger)
    assert written.proposal is not None and written.proposal.source == "template"
    assert {a.capacity for a in written.spec.agents} <= set(LEVELS) and ledger.used == 0


# Comparisons with a method name outside methods.py (the baselines' registry needs none: it is keyed by name), each
# with the reason it is not a method dispatch. Anything else is: add the behaviour to a Method class instead.
_NOT_METHOD_DISPATCH = {
    # `lemon run --orchestrator`: its one resolver (it moved there from cli/session.py), see report
    ("orchestrator/resolve.py", "template"), ("orchestrator/resolve.py", "prompted"),
    ("cli/train_cmds.py", "chain"), ("train/rollout.py", "chain"),  # --fixed-structure chain, a training ablation
    ("evaluation/bank.py", "sc-cot"),  # the sample bank's runs: the report's item difficulty, the bank teacher
}
_NAMES = {*BASELINES, "template", "prompted", "trained"}


def _compared_strings(node: ast.AST) -> list[str]:
    values: list[ast.expr] = []
    if isinstance(node, ast.Compare):
        for operand in (node.left, *node.comparators):
            values.extend(operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
            "startswith", "partition", "split", "removeprefix"):
        values.extend(node.args)
    return [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]


def test_no_method_name_dispatch_outside_the_methods_module() -> None:
    found = set()
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel == "evaluation/methods.py":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            for text in _compared_strings(node):
                if text in _NAMES or text.startswith("trained:"):
                    found.add((rel, text.rstrip(":")))
    assert found <= _NOT_METHOD_DISPATCH, f"method-name dispatch outside methods.py: {found - _NOT_METHOD_DISPATCH}"
