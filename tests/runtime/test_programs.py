"""Program-of-thought agents (`program` roles): the reply's code runs in the real sandbox and what it prints is
the agent's answer; the model's own text is what a logprob gate scores.

The models are scripted test doubles (the reply is a fixed program per voter); the sandbox is the real
bubblewrap one, as HumanEval's scoring uses."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lemon.evaluation.baselines import baseline_spec, voter_team
from lemon.extract import extract_number
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.scripted import ScriptedBackend, count_tokens
from lemon.runtime import Executor, NodeCache, programs
from lemon.runtime.executor import derive_seed, sample_slot
from lemon.sandbox.runner import SandboxResult
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.roles import RoleLibrary
from tests.pools import scripted_pool

ROLES = RoleLibrary.load()


def program(expr: str, tail: str = "") -> str:
    return f"Here is the program.\n```python\nanswer = {expr}\nprint(answer)\n```\n{tail}"


def voters_writing(replies: list[str]) -> ScriptedBackend:
    """Voter k (the k-th program agent, by its duty "Voter k.") writes replies[k]; scores are the reply's length."""
    def reply(request: ChatRequest) -> str:
        system = request.messages[0].content
        return next((r for k, r in enumerate(replies) if f"Voter {k}." in system), "no code")

    return ScriptedBackend("scripted", responder=reply, scorer=lambda _request, text: -float(len(text)))


def program_vote(n: int, rule: StopRule | None) -> Spec:
    voters = tuple(Agent(name=f"p{k}", role="program_solver", duty=f"Voter {k}.", capacity="large")
                   for k in range(n))
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(v.name for v in voters),
                 stop=rule)
    return Spec(agents=(*voters, vote), output="vote")


def test_the_printed_number_is_the_answer_not_the_models_own_claim() -> None:
    backend = voters_writing([program("3 * 4", tail="The answer is 99.")])
    spec = Spec(agents=(Agent(name="solver", role="program_solver", duty="Voter 0.", capacity="large"),),
                output="solver")
    result = asyncio.run(Executor(scripted_pool(backend), ROLES).run(spec, "task"))
    assert result.status == "ok"
    assert extract_number(result.answer) == "12"
    assert "Program output: 12" in result.outputs["solver"]
    # Tokens are the model's: running the program is free, and the appended lines are not charged.
    assert result.tokens_by_agent["solver"]["completion"] == count_tokens(program("3 * 4", tail="The answer is 99."))


def test_programs_vote_and_stop_like_prose_voters() -> None:
    replies = [program("2 + 2"), program("5"), program("8 / 2"), program("7")]
    result = asyncio.run(Executor(scripted_pool(voters_writing(replies)), ROLES)
                         .run(program_vote(4, StopRule(agree=2)), "task", vote_key=extract_number))
    assert extract_number(result.answer) == "4"
    assert result.unrun == ("p3",)  # 4 and 4.0 agree at the third voter: the fourth never runs


def test_a_failing_program_gives_no_number_and_the_reply_stands() -> None:
    failing = "```python\nx = 10\nprint(x / 0)\n```\nThe answer is 7."
    silent = "```python\nx = 10\n```"
    result = asyncio.run(Executor(scripted_pool(voters_writing([failing, silent])), ROLES)
                         .run(program_vote(2, None), "task", vote_key=extract_number))
    assert "ZeroDivisionError" in result.outputs["p0"]
    assert extract_number(result.outputs["p0"]) == "7"  # the model's own answer, not a digit of the traceback
    assert "printed nothing" in result.outputs["p1"]


def test_the_gate_scores_what_the_model_wrote() -> None:
    replies = [program("6 * 7")]
    backend = voters_writing(replies)
    spec = program_vote(2, StopRule(agree=2, logprob=-1000))  # every reply is sure
    result = asyncio.run(Executor(scripted_pool(backend), ROLES).run(spec, "task", vote_key=extract_number))
    assert [text for _, text in backend.scored] == replies  # not the reply with the program's output appended
    assert extract_number(result.answer) == "42"


def test_the_node_cache_runs_a_program_once(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []
    real = programs.run_script

    def counting(code: str, timeout_s: float) -> SandboxResult:
        runs.append(code)
        return real(code, timeout_s)

    monkeypatch.setattr(programs, "run_script", counting)
    ex = Executor(scripted_pool(voters_writing([program("1 + 1")])), ROLES, node_cache=NodeCache())
    spec = program_vote(1, None)
    first = asyncio.run(ex.run(spec, "task", vote_key=extract_number))
    again = asyncio.run(ex.run(spec, "task", vote_key=extract_number))
    assert first.answer == again.answer and extract_number(first.answer) == "2"
    assert len(runs) == 1


@settings(max_examples=200, deadline=None)
@given(detail=st.text(max_size=80), status=st.sampled_from(["failed", "timeout", "error"]))
def test_a_failure_never_adds_a_number(detail: str, status: str) -> None:
    """Whatever a failed program's error says, the output adds no number a vote could count."""
    out = programs.with_result("no digits here", SandboxResult(False, status, detail))  # type: ignore[arg-type]
    assert extract_number(out) is None


def test_the_last_code_block_is_the_program() -> None:
    assert programs.program_code("```python\nx = 1\n```\ntext\n```py\nx = 2\n```") == "x = 2\n"
    assert programs.program_code("no code at all, The answer is 3.") is None


def test_the_pot_baselines_are_number_only() -> None:
    spec = baseline_spec("pot-esc", "number", level="large")
    assert [a.role for a in spec.agents] == ["program_solver"] * 5 + ["majority_vote"]
    assert spec.agents[-1].stop == StopRule(agree=2)
    full = baseline_spec("sc-pot", "number", level="large")  # the same voters: pot-esc's run is a prefix of it
    assert full.agents[:-1] == spec.agents[:-1] and full.agents[-1].stop is None
    assert baseline_spec("pot", "number", level="large").agents[0].role == "program_solver"
    mixed = baseline_spec("mixed-esc", "number", level="large")  # two programs first, then prose
    assert [a.role for a in mixed.agents[:-1]] == ["program_solver"] * 2 + ["math_solver"] * 3
    assert mixed.agents[:2] == spec.agents[:2] and mixed.agents[-1].stop == StopRule(agree=2)
    with pytest.raises(Exception, match=r"n must be in \[3, "):
        baseline_spec("mixed-esc", "number", level="large", n=2)
    with pytest.raises(Exception, match="number benchmarks only"):
        baseline_spec("pot", "choice", level="large")


@given(order=st.text(alphabet="PC", min_size=2, max_size=5))
def test_a_written_order_draws_each_roles_banked_samples_in_rank(order: str) -> None:
    """The k-th program (prose) voter of any order is the k-th of sc-pot's (sc-cot's): the same banked draw."""
    team = voter_team("number", "large", order)
    for agent in team.agents[:-1]:
        pool = baseline_spec("sc-pot" if agent.role == "program_solver" else "sc-cot", "number", level="large")
        rank = int(sample_slot(team, agent.name).split("#")[1])
        assert agent.model_dump(exclude={"name"}) == pool.agents[rank].model_dump(exclude={"name"})
    assert team.agents[-1].stop == StopRule(agree=2)


def test_the_named_program_teams_are_written_orders() -> None:
    for method, order in (("pot-esc", "PPPPP"), ("mixed-esc", "PPCCC"), ("cross-check", "CPCCC")):
        assert voter_team("number", "large", order) == baseline_spec(method, "number", level="large")
    with pytest.raises(ValueError, match=r"letters P .* or C"):
        voter_team("number", "large", "PXC")
    with pytest.raises(ValueError, match="number benchmarks only"):
        voter_team("choice", "large", "PC")


def test_a_gated_order_is_the_order_with_the_gate_on_its_vote() -> None:
    """`gate` adds the logprob gate to the vote's agree-2 rule and changes nothing else, so a gated order draws
    the same banked voters as the plain one."""
    plain, gated = voter_team("number", "large", "CPCCC"), voter_team("number", "large", "CPCCC", -30)
    assert gated.agents[:-1] == plain.agents[:-1]
    assert gated.agents[-1].stop == StopRule(agree=2, logprob=-30)
    with pytest.raises(ValueError, match="a gate needs a vote"):
        voter_team("number", "large", "C", -30)


def test_a_flood_of_output_leaves_a_short_answer() -> None:
    out = programs.with_result("r", SandboxResult(True, "passed", "", stdout="noise\n" + "7" * 5000 + "\n"))
    assert out.endswith("The answer is " + "7" * programs.MAX_ANSWER_CHARS + ".")


def drawing(prose: list[str], programs_: list[str]) -> ScriptedBackend:
    """Sampled voters: the k-th CoT voter (`math_solver#k`) says prose[k], the k-th program voter writes
    programs_[k] (each found by its sampling seed, as the bank finds it)."""
    seeds = {derive_seed(0, f"math_solver#{k}"): f"The answer is {a}." for k, a in enumerate(prose)}
    seeds |= {derive_seed(0, f"program_solver#{k}"): program(e) for k, e in enumerate(programs_)}
    return ScriptedBackend("scripted", responder=lambda r: seeds[r.params.seed])  # type: ignore[index]


@pytest.mark.parametrize(("prose", "program_", "ran", "answer"), [
    (["12", "13", "13"], "12", ["cot_1", "pot_1"], "12"),  # the program confirms the prose answer: stop at two
    (["12", "13", "14"], "13", ["cot_1", "pot_1", "cot_2"], "13"),  # they disagree: prose breaks the tie
    (["12", "14", "12", "9"], "13", ["cot_1", "pot_1", "cot_2", "cot_3"], "12"),  # esc over the rest
    (["12", "14", "15", "16"], "13", ["cot_1", "pot_1", "cot_2", "cot_3", "cot_4"], "12"),  # none agree: all run
])
def test_the_cross_check_stops_when_the_program_confirms_prose_else_goes_on_as_esc(
        prose: list[str], program_: str, ran: list[str], answer: str) -> None:
    spec = baseline_spec("cross-check", "number", level="large")
    pool = scripted_pool(drawing(prose, [program_]), defaults=GenParams(temperature=0.7))
    result = asyncio.run(Executor(pool, ROLES).run(spec, "task", vote_key=extract_number))
    assert result.status == "ok" and extract_number(result.answer) == answer
    assert [a for a in result.tokens_by_agent if a != "vote"] == ran
    assert result.early_stops[0]["fired"] is (len(ran) < 5)
