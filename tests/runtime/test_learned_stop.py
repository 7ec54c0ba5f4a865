"""`stop: {learned: NAME}`: the runtime asks the packaged policy after each parent returns, and does what it says.

The scripted test double answers each voter from its duty; program voters print their answer in the real
sandbox. What must hold: the parents run are exactly those the policy chose, one decision per parent that
returned, each decision's probability and action are the policy's own on the same moment (rebuilt here from
the trace), unrun parents cost no call, and the rule is validated, rendered and edited like any other."""

from __future__ import annotations

import pytest

from lemon.cli.view_cmds import stop_rule_line
from lemon.errors import SpecError
from lemon.llm.base import ChatRequest
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.spec.edits.stop import stop_variants
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.stops.policy import Moment, Reply, packaged_policy, policy_names
from lemon.spec.validate import load_spec
from tests.pools import LEVELS, scripted_pool

ROLES = RoleLibrary.load()
TASK = "Tom has 3 apples and buys 4 more. How many apples does he have?"


def team(prose: list[str], programs: list[str]) -> tuple[Spec, ScriptedBackend]:
    """Prose voters c0.. answering `prose`, program voters p0.. printing `programs`, a learned vote."""
    def reply(request: ChatRequest) -> str:
        system = request.messages[0].content
        for i, answer in enumerate(prose):
            if f"Prose {i}." in system:
                return f"So the answer is {answer}."
        for i, answer in enumerate(programs):
            if f"Program {i}." in system:
                return f"```python\nprint({answer})\n```"
        return "?"
    voters = [Agent(name=f"c{i}", role="math_solver", duty=f"Prose {i}.", capacity="large") for i in range(len(prose))]
    voters += [Agent(name=f"p{i}", role="program_solver", duty=f"Program {i}.", capacity="large")
               for i in range(len(programs))]
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(v.name for v in voters),
                 stop=StopRule(learned="number"))
    return Spec(agents=(*voters, vote), output="vote"), ScriptedBackend("scripted", responder=reply)


def number_key(text: str) -> str | None:
    words = text.replace(".", " ").split()
    return next((w for w in reversed(words) if w.isdigit()), None)


@pytest.mark.parametrize(("prose", "programs"), [
    (["7", "7", "7", "7", "7"], ["7", "7", "7", "7", "7"]),
    (["7", "9", "12", "7", "30"], ["7", "8", "7", "7", "7"]),
    (["5", "9", "12", "13", "30"], ["1", "2", "3", "4", "6"]),
])
async def test_the_runtime_does_what_the_policy_decides_on_the_same_moments(prose: list[str],
                                                                           programs: list[str]) -> None:
    spec, backend = team(prose, programs)
    result = await Executor(scripted_pool(backend), ROLES).run(spec, TASK, vote_key=number_key)
    assert result.status == "ok"
    (stop,) = [e for e in result.trace.events if e["type"] == "stop" and e.get("reason") == "stop_rule"]
    decisions, ran = stop["decisions"], stop["ran"]
    assert ran[0] == "c0" and len(decisions) == len(ran)  # one decision after each parent that returned
    assert [d["next"] for d in decisions] == [*ran[1:], None]
    assert len(backend.calls) == len(ran)  # a parent never chosen is never called
    policy, tokens = packaged_policy("number"), result.tokens_by_agent
    for i, d in enumerate(decisions):
        done = ran[:i + 1]
        replies = tuple(Reply(p.startswith("p"), number_key(result.outputs[p]), None, tokens[p]["completion"], False)
                        for p in done)
        left = [a.name for a in spec.agents if a.name != "vote" and a.name not in done]
        moment = Moment(replies, sum(not p.startswith("p") for p in left), sum(p.startswith("p") for p in left),
                        len(TASK))
        action, p = policy.decide(moment)
        assert (d["action"], d["p_right"]) == (action, round(p, 4))
    assert result.answer and number_key(result.answer) == moment.leader()
    # `lemon trace` and `lemon explain` say each decision in words
    line = stop_rule_line(stop)
    assert all(f"{d['action']} (P(leader right) {d['p_right']})" in line for d in decisions)


def test_the_rule_is_validated_rendered_and_edited_like_any_other() -> None:
    spec, _ = team(["7"] * 3, ["7"] * 2)
    text = render_spec(spec).text
    assert "stop: {learned: number}" in text
    assert load_spec(text, ROLES, LEVELS) == spec
    with pytest.raises(SpecError, match="no learned stop policy 'nosuch'"):
        load_spec(text.replace("learned: number", "learned: nosuch"), ROLES, LEVELS)
    with pytest.raises(SpecError, match="learned decides alone"):
        load_spec(text.replace("{learned: number}", "{learned: number, agree: 2}"), ROLES, LEVELS)
    with pytest.raises(SpecError):
        load_spec(text.replace("learned: number", "learned: ../../etc/passwd"), ROLES, LEVELS)
    # its counterfactual family: `remove_stop` drops the rule; one notch away is `max` moved by two (or another
    # packaged policy of the same answer kind where there is one: `choice` is packaged, and not offered here)
    variants = stop_variants(spec.agent("vote"))
    assert StopRule(max=3, learned="number") in variants  # the voter cap moved, the same policy
    assert "choice" in policy_names()
    assert {v.learned for v in variants} == {"number"}  # no other kind's policy on number voters
    assert all(v.learned == "number" and v.max == 3 for v in variants if v.learned == "number")


def test_the_stop_family_offers_policies_of_the_same_answer_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a second number policy packaged (named by the `KIND-...` convention), one notch from `number` is it,
    never the choice policy (a stand-in list of names: the files themselves are not needed to offer a name)."""
    import lemon.spec.stops.learned as learned

    monkeypatch.setattr(learned, "policy_names", lambda: ["choice", "number", "number-cheap"])
    assert learned.Learned().variants("number", 5) == ["number-cheap", None]
    assert learned.Learned().variants("number-cheap", 5) == ["number", None]
    assert learned.Learned().variants("choice", 5) == [None]
