"""`stop: {posterior: c}` (after CGES): the vote stops once its answer's confidence-weighted posterior reaches c.

The posterior is checked against an independent computation (Bayes' rule written out over the hypotheses, each
reply's likelihood multiplied in); the runtime's decision on the scripted test double, whose replies are one
whitespace token each (so a reply's per-token probability is exp of its score) and whose scores come from a
table, so which parents run and what the vote says is known exactly."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lemon.errors import SpecError
from lemon.evaluation.baselines import CGES_POSTERIOR, baseline_spec
from lemon.llm.base import ChatRequest, Completion
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor, RunResult
from lemon.spec.edits import draw_edit
from lemon.spec.edits.stop import StopFamily, stop_variants
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.parse import parse_spec
from lemon.spec.render import FieldRef, render_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.stops.posterior import W_HIGH, answer_posterior, reply_weight, winner_posterior
from lemon.spec.validate import load_spec, validate_spec
from tests.pools import LEVELS, scripted_pool

ROLES = RoleLibrary.load()


def bayes(answers: Sequence[str | None], weights: Sequence[float]) -> dict[str, float]:
    """The reference: a uniform prior over "a is right" for each answer given and "none is"; each reply is
    right with probability w (its answer is a) and wrong otherwise; the posterior is prior x likelihood,
    normalised."""
    hypotheses: list[str | None] = [*dict.fromkeys(a for a in answers if a is not None), None]
    joint = {h: math.prod(w if a is not None and a == h else 1 - w for a, w in zip(answers, weights, strict=True))
             for h in hypotheses}
    total = sum(joint.values())
    return {h: p / total for h, p in joint.items() if h is not None}


@given(st.lists(st.tuples(st.sampled_from(["A", "B", "C", None]), st.floats(0.01, 0.99)), min_size=1, max_size=8))
def test_the_posterior_is_bayes_rule_over_the_answers_and_none_of_them(replies: list[tuple[str | None, float]]) -> None:
    answers, weights = [a for a, _ in replies], [w for _, w in replies]
    expected = bayes(answers, weights)
    got = answer_posterior(answers, weights)
    assert got.keys() == expected.keys()
    for a, p in expected.items():
        assert got[a] == pytest.approx(p, rel=1e-9, abs=1e-12)


def test_the_posterior_in_closed_form() -> None:
    assert answer_posterior(["A"], [0.9]) == {"A": pytest.approx(0.9)}  # one reply: its own confidence
    assert answer_posterior(["A", "A"], [0.9, 0.9])["A"] == pytest.approx(0.81 / 0.82)  # w^2 / (w^2 + (1-w)^2)
    assert answer_posterior([None, None], [0.9, 0.9]) == {}  # no answer moves nothing
    # the vote's answer, not the surest one: B twice (weak) beats A once (sure) in a majority vote
    assert winner_posterior(["B", "A", "B"], [0.6, 0.99, 0.6]) == pytest.approx(bayes(["B", "A", "B"],
                                                                                      [0.6, 0.99, 0.6])["B"])
    assert winner_posterior([None], [0.9]) == 0.0
    # a reply no model scored is no evidence: its answer is as likely as "none of them"
    assert answer_posterior(["A"], [reply_weight(None, 10)]) == {"A": pytest.approx(0.5)}


def test_a_reply_s_weight_is_its_per_token_probability_clamped() -> None:
    assert reply_weight(-20.0, 200) == pytest.approx(math.exp(-0.1))
    assert reply_weight(0.0, 5) == W_HIGH and reply_weight(-1e6, 1) == 1e-6
    assert reply_weight(-2.0, 0) == pytest.approx(math.exp(-2.0))  # an empty reply counts as one token
    assert math.isfinite(answer_posterior(["A"] * 50, [W_HIGH] * 50)["A"])


def team(n: int, rule: StopRule | None) -> Spec:
    voters = tuple(Agent(name=f"v{i}", role="math_solver", duty=f"Voter {i}.", capacity="large") for i in range(n))
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(v.name for v in voters),
                 stop=rule)
    return Spec(agents=(*voters, vote), output="vote")


def voters(answers: list[str], sure: dict[str, float]) -> ScriptedBackend:
    """Voter i answers answers[i] (one token), scored log(sure[answer]): its per-token probability."""
    def reply(request: ChatRequest) -> str:
        return next(a for i, a in enumerate(answers) if f"Voter {i}." in request.messages[0].content)

    return ScriptedBackend("scripted", responder=reply, scorer=lambda _r, text: math.log(sure[text]))


def ran(result: RunResult) -> list[str]:
    return [e["agent"] for e in result.trace.events if e["type"] == "return" and e["agent"] != "vote"]


async def _run(backend: object, answers: list[str], c: float) -> RunResult:
    return await Executor(scripted_pool(backend), ROLES).run(  # type: ignore[arg-type]
        team(len(answers), StopRule(posterior=c)), "task")


@pytest.mark.parametrize(("answers", "sure", "c", "stops_after", "answer"), [
    (["A", "B", "B"], {"A": 0.97, "B": 0.9}, 0.95, 1, "A"),  # one reply surer than c decides alone
    (["A", "A", "B"], {"A": 0.9, "B": 0.9}, 0.95, 2, "A"),  # two agreeing at 0.9: 0.988
    (["A", "B", "A", "A", "B"], {"A": 0.9, "B": 0.9}, 0.95, 4, "A"),  # A twice vs B once: 0.89; thrice: 0.99
    (["A", "B", "A", "B", "C"], {"A": 0.9, "B": 0.9, "C": 0.5}, 0.95, 5, "A"),  # never settled: all run
    # the surest answer is not the vote's: A at 0.99 leads the posterior after two replies, but the vote says B
    (["B", "A", "B", "B", "B"], {"A": 0.99, "B": 0.6}, 0.95, 5, "B"),
])
async def test_the_vote_stops_once_its_answer_s_posterior_reaches_c(
        answers: list[str], sure: dict[str, float], c: float, stops_after: int, answer: str) -> None:
    backend = voters(answers, sure)
    result = await _run(backend, answers, c)
    assert result.status == "ok" and result.answer == answer
    assert ran(result) == [f"v{i}" for i in range(stops_after)]
    assert [text for _, text in backend.scored] == answers[:stops_after]  # one scoring pass per reply, not per wave
    keys = answers[:stops_after]
    weights = [sure[a] for a in keys]
    fired = bayes(keys, weights)[answer] >= c
    assert result.early_stops[0]["fired"] is fired and result.early_stops[0]["rule"] == f"{{posterior: {c}}}"
    for k in range(1, stops_after):  # it did not stop earlier: the vote's answer then was below c
        winner = max(dict.fromkeys(answers[:k]), key=answers[:k].count)
        assert bayes(answers[:k], [sure[a] for a in answers[:k]])[winner] < c


class GeneratedLogprobs(ScriptedBackend):
    """A double whose generation reports each reply's log-probability (as embedded llama.cpp does), and that
    fails if asked for a separate scoring pass."""

    async def complete(self, request: ChatRequest) -> Completion:
        done = await super().complete(request)
        return Completion(done.text, done.prompt_tokens, done.completion_tokens, done.latency_s, done.model,
                          logprob=math.log(0.9))

    async def score(self, request: ChatRequest, reply: str) -> float:
        raise AssertionError("the generation's log-probability is used, with no scoring pass")


async def test_the_generation_s_log_probability_is_used_without_a_scoring_pass() -> None:
    backend = GeneratedLogprobs("scripted", responder=lambda r: "A")
    result = await _run(backend, ["A", "A", "A"], 0.95)
    assert ran(result) == ["v0", "v1"] and result.answer == "A"


class CompletesOnly(ScriptedBackend):
    """Not a Scorer (as an OpenAI-compatible endpoint is not)."""

    score = None  # type: ignore[assignment]


async def test_a_pool_that_cannot_score_is_refused_before_any_call() -> None:
    backend = CompletesOnly("openai:remote", responder=lambda r: "A")
    result = await _run(backend, ["A", "A", "A"], 0.9)
    assert result.status == "error" and result.calls == 0
    assert result.stop_reason == (
        "agent 'vote', field stop: its posterior criterion reads each parent's reply log-probability, and level "
        "'large' (openai:remote) gives none (an embedded llama.cpp model does, and an OpenAI-compatible level "
        "whose server returns them, marked `logprobs: true` in the pool); serve that level so, or remove "
        "posterior from the rule")


TEXT = ("agents:\n" + "".join(f"  - {{name: v{i}, role: math_solver, capacity: large}}\n" for i in range(3))
        + "  - {name: vote, role: majority_vote, capacity: large, depends_on: [v0, v1, v2], stop: RULE}\n")


@pytest.mark.parametrize(("rule", "message"), [
    ("{posterior: 1.2}", "less than or equal to 0.99"),
    ("{posterior: 0.3}", "greater than or equal to 0.5"),
    ("{posterior: 0.951}", "posterior has at most two decimals"),
    ("{posterior: sure}", "stop.posterior"),
    ("{posterior: 0.9, agree: 2}", "exactly one of agree (a count) or confidence (a probability) or posterior"),
])
def test_hostile_posterior_rules_are_one_line_errors(rule: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(TEXT.replace("RULE", rule), ROLES, LEVELS)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_rule_renders_round_trips_and_sits_beside_a_gate() -> None:
    spec = load_spec(TEXT.replace("RULE", "{posterior: 0.9, max: 2}"), ROLES, LEVELS)
    rule = spec.agent("vote").stop
    assert rule is not None and rule.posterior == 0.9 and rule.first_wave == 1 and rule.agree is None
    rendered = render_spec(spec)
    span = rendered.spans[FieldRef("stop", "vote")]
    assert rendered.text[span.start:span.end] == "{posterior: 0.9, max: 2}" and parse_spec(rendered.text) == spec
    assert StopRule.model_validate(rule.model_dump()) == rule
    gated = load_spec(TEXT.replace("RULE", "{logprob: -10, posterior: 0.9}"), ROLES, LEVELS)
    assert "stop: {logprob: -10, posterior: 0.9}" in render_spec(gated).text
    # the rules written before it dump as they did (run ids hash the dump)
    assert "posterior" not in StopRule(agree=2).model_dump()


def test_its_edits_move_c_by_a_notch_within_bounds() -> None:
    def variants(c: float) -> list[float]:
        return [r.posterior for r in stop_variants(team(5, StopRule(posterior=c)).agent("vote"))
                if r.posterior != c and r.posterior is not None]

    assert variants(0.9) == [0.85, 0.95]
    assert variants(0.99) == [0.94] and variants(0.5) == [0.55]
    spec = validate_spec(team(5, StopRule(posterior=0.9)), ROLES, LEVELS)
    edited = spec.model_copy(update={"agents": (*spec.agents[:-1],
                                                spec.agents[-1].model_copy(update={"stop": StopRule(posterior=0.95)}))})
    said = StopFamily().describe(spec, edited, FieldRef("stop", "vote"))
    assert said.startswith("change the stop rule of vote: {posterior: 0.9} -> {posterior: 0.95}")
    assert said.endswith("; the vote stops later: once its answer's confidence-weighted posterior is >= 0.95 "
                         "instead of >= 0.9")
    edit = draw_edit(spec, "stop", FieldRef("stop", "vote"), LEVELS, random.Random(0))
    assert edit.spec.agent("vote").stop in (None, *stop_variants(spec.agent("vote")))


def test_the_cges_baseline_is_sc_cot_with_the_posterior_rule() -> None:
    cges, sc = baseline_spec("cges", "number", level="large"), baseline_spec("sc-cot", "number", level="large")
    assert cges.agents[:-1] == sc.agents[:-1]  # the same voters: paired with sc-cot
    assert cges.agents[-1].stop == StopRule(posterior=CGES_POSTERIOR)
