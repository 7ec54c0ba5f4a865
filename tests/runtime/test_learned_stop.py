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


def _trial_policy(folder, name: str, opening: str, agree: int | None) -> None:
    """A format-2 policy in a stand-in trial folder: P(leader right) 0.5 everywhere (zero weights), so only its
    opening, its floor and its thresholds decide."""
    from lemon.spec.stops.policy import FEATURES, StopPolicy

    folder.mkdir(exist_ok=True)
    policy = StopPolicy(name, tuple(0.0 for _ in FEATURES), 0.9, 0.4, opening, agree)  # type: ignore[arg-type]
    (folder / f"{name}.json").write_text(__import__("json").dumps(policy.to_json()))


async def test_a_trial_policy_opens_as_it_says_and_stops_at_its_floor(tmp_path, monkeypatch) -> None:
    """A format-2 policy decides its opening voter (recorded, before any reply) and stops once the leader has
    `agree` votes; runnable by name, it is not offered to the grammar (which lists the offered policies only)."""
    import lemon.spec.stops.policy as policy_module
    from lemon.spec.grammar import _candidates
    from lemon.spec.stops.learned import Learned

    monkeypatch.setattr(policy_module, "TRIAL", tmp_path / "trial")
    _trial_policy(tmp_path / "trial", "number-budget", "program", 2)
    spec, backend = team(["9", "9", "9"], ["7", "8", "7"])
    spec = spec.model_copy(update={"agents": (*spec.agents[:-1], spec.agents[-1].model_copy(
        update={"stop": StopRule(learned="number-budget")}))})
    result = await Executor(scripted_pool(backend), ROLES).run(spec, TASK, vote_key=number_key)
    (stop,) = [e for e in result.trace.events if e["type"] == "stop" and e.get("reason") == "stop_rule"]
    # opens with a program voter; p = 0.5 lies between verify_at and stop_at, so it verifies with programs until
    # two agree: p0 (7), p1 (8), p2 (7), then the floor stops it; no prose voter is ever called
    assert stop["ran"] == ["p0", "p1", "p2"] and len(backend.calls) == 3
    assert stop["decisions"][0] == {"after": [], "action": "open with program", "next": "p0"}
    assert [d["action"] for d in stop["decisions"][1:]] == ["verify", "verify", "stop"]
    assert number_key(result.answer or "") == "7"
    assert "before any reply: open with program -> p0" in stop_rule_line(stop)
    assert "number-budget" not in policy_names() and "number-budget" not in _candidates(Learned(), {"type": "string"})
    text = render_spec(spec).text
    assert load_spec(text, ROLES, LEVELS) == spec  # validated by name like a packaged policy


async def test_a_format_1_policy_keeps_the_written_opening_and_records_no_opening_decision() -> None:
    spec, backend = team(["7", "7", "7"], ["7", "7"])
    result = await Executor(scripted_pool(backend), ROLES).run(spec, TASK, vote_key=number_key)
    (stop,) = [e for e in result.trace.events if e["type"] == "stop" and e.get("reason") == "stop_rule"]
    assert stop["ran"][0] == "c0" and all(d["after"] for d in stop["decisions"])


def test_the_packaged_trial_policies_load_and_are_not_offered() -> None:
    """The committed trial files (experiments/learn_stop_budget.py) are valid format-2 policies of their kinds,
    runnable by name and absent from the grammar's list (the trained cards' keys hold that list)."""
    from lemon.spec.stops.policy import trial_names

    assert trial_names() == ["choice-budget", "number-budget"]
    for name in trial_names():
        policy = packaged_policy(name)
        assert policy.opening is not None and name not in policy_names()
