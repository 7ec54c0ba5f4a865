"""Baselines are specs: every method x answer kind is a valid spec of the documented shape."""

from __future__ import annotations

import pytest

from lemon.errors import LemonError
from lemon.evaluation import baselines
from lemon.evaluation.baselines import COT_DUTY, baseline_spec, method_names, supports
from lemon.orchestrator.kinds import answer_kind
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from tests.pools import LEVELS

KINDS = ("number", "choice", "code")


@pytest.fixture(scope="module")
def roles() -> RoleLibrary:
    return RoleLibrary.load()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", method_names())
def test_every_method_and_kind_validates(method: str, kind: str, roles: RoleLibrary) -> None:
    if not supports(method, kind):  # a one-line error that names what to use instead
        with pytest.raises(LemonError, match=r"(number|code) benchmarks only.*use (cot|esc)"):
            baseline_spec(method, kind, level="medium", seed=3)
        return
    spec = baseline_spec(method, kind, level="medium", seed=3)
    normalized = validate_spec(spec, roles, LEVELS)
    assert normalized.final_agent() == spec.final_agent()
    assert {a.capacity for a in spec.agents} == {"medium"}
    assert len(spec.sinks()) == 1 and spec.sinks()[0] == spec.final_agent()
    for agent in spec.agents:
        assert agent.role in roles


def test_expected_methods() -> None:
    assert method_names() == ("vanilla", "cot", "sc-cot", "esc", "asc", "gate", "cges", "exsc", "pot", "sc-pot",
                              "pot-esc", "mixed-esc", "cross-check", "chain", "tree", "complete", "random")


@pytest.mark.parametrize("kind", KINDS)
def test_single_agent_methods(kind: str) -> None:
    vanilla = baseline_spec("vanilla", kind, level="small")
    cot = baseline_spec("cot", kind, level="small")
    assert len(vanilla.agents) == len(cot.agents) == 1
    assert vanilla.agents[0].role == cot.agents[0].role == answer_kind(kind).roles[1]
    assert vanilla.agents[0].duty == "" and cot.agents[0].duty == COT_DUTY


@pytest.mark.parametrize("kind", KINDS)
def test_sc_cot_aggregates_with_a_vote_node(kind: str, roles: RoleLibrary) -> None:
    spec = baseline_spec("sc-cot", kind, level="large")
    final = spec.agent(spec.final_agent())
    assert roles[final.role].kind == "vote"
    workers = [a for a in spec.agents if a.name != final.name]
    assert len(workers) == 5 and set(final.depends_on) == {a.name for a in workers}
    assert all(a.duty == COT_DUTY and a.depends_on == () and roles[a.role].kind == "llm" for a in workers)
    assert len(baseline_spec("sc-cot", kind, level="large", n=3).agents) == 4


def test_chain_tree_complete_shapes() -> None:
    chain = baseline_spec("chain", "number", level="small")
    assert [a.depends_on for a in chain.agents] == [(), ("solver",), ("checker",)]
    tree = baseline_spec("tree", "choice", level="small")
    assert tree.agent("worker_1").depends_on == tree.agent("worker_2").depends_on == ("root",)
    assert set(tree.agent("aggregator").depends_on) == {"worker_1", "worker_2"}
    assert tree.agent("worker_1").duty != tree.agent("worker_2").duty  # distinct even when greedy
    complete = baseline_spec("complete", "code", level="small")
    names = complete.names
    assert len(names) == 4
    for i, agent in enumerate(complete.agents):
        assert agent.depends_on == names[:i]


def test_random_is_seeded_and_has_one_sink() -> None:
    graphs = set()
    for seed in range(40):
        spec = baseline_spec("random", "number", level="small", seed=seed)
        assert spec == baseline_spec("random", "number", level="small", seed=seed)
        assert spec.sinks() == (spec.final_agent(),) == (spec.names[-1],)
        for i, agent in enumerate(spec.agents):  # edges only point forward: a DAG
            assert set(agent.depends_on) <= set(spec.names[:i])
        graphs.add(tuple(a.depends_on for a in spec.agents))
    assert len(graphs) > 5


def test_bad_names_are_one_line_errors() -> None:
    with pytest.raises(LemonError, match="valid: vanilla, cot, sc-cot"):
        baseline_spec("nope", "number", level="small")
    with pytest.raises(LemonError, match="number, choice, code"):
        baseline_spec("cot", "essay", level="small")
    with pytest.raises(LemonError, match="n must be"):
        baseline_spec("sc-cot", "number", level="small", n=1)


@pytest.mark.parametrize("method", ["sc-pot", "pot-esc", "mixed-esc", "cross-check"])
def test_a_program_team_larger_than_the_bank_is_one_line(method: str) -> None:
    """Their voters are written orders of at most the bank's 5 (`voter_team`): 6 was a ValueError's traceback."""
    with pytest.raises(LemonError, match=r"n must be in \[\d, 5\], got 6"):
        baseline_spec(method, "number", level="small", n=6)


@pytest.mark.parametrize("baseline", baselines.baselines(), ids=lambda b: b.name)
def test_what_a_baseline_says_of_itself_is_what_its_spec_does(baseline: baselines.BaselineKind,
                                                              roles: RoleLibrary) -> None:
    """The registry's facts (program voters, reply scores, the task's examples) are read off the spec it builds,
    and the package's docstring describes it."""
    kind = "number" if baseline.applies_to(answer_kind("number")) else "code"
    spec = baseline_spec(baseline.name, kind, level="large")
    rules = [a.stop for a in spec.agents if a.stop is not None]
    assert baseline.program_voters == any(roles[a.role].runs_program for a in spec.agents)
    assert baseline.scores_replies == any(r.logprob is not None or r.posterior is not None for r in rules)
    assert baseline.runs_examples == any(r.examples for r in rules)
    least, most = (baseline_spec(baseline.name, kind, level="large", n=n) for n in (baseline.least_n, baseline.most_n))
    assert (baseline.default_n is None) == (least == most)  # a fixed shape ignores n
    assert f"`{baseline.name}`" in (baselines.__doc__ or "") and baseline.description


@pytest.mark.parametrize(("method", "rule"), [("esc", "{agree: 2}"), ("asc", "{confidence: 0.95}"),
                                            ("gate", "{logprob: -30, agree: 2}")])
def test_the_stopping_anchors_are_sc_cot_whose_vote_stops(method: str, rule: str) -> None:
    from lemon.spec.render import render_spec

    stopping, full = (baseline_spec(m, "number", level="large") for m in (method, "sc-cot"))
    assert stopping.agents[:-1] == full.agents[:-1]  # the same voters: the same samples, a paired comparison
    assert stopping.agents[-1].model_copy(update={"stop": None}) == full.agents[-1]
    assert f"stop: {rule}" in render_spec(stopping).text
