"""Vote teams: `sc-cot` (self-consistency: n CoT voters and a majority vote) and the teams whose vote stops early,
`esc`, `asc`, `gate`, `cges` and `exsc` (sc-cot's voters, a prefix of them run: a paired comparison)."""

from __future__ import annotations

from lemon.evaluation.baselines.base import COT_DUTY, BaselineKind, Builder
from lemon.orchestrator.kinds import AnswerKind
from lemon.spec.model import MAX_AGENTS, Agent, Spec, StopRule

#: Adaptive-Consistency's default threshold on P(the leading answer is the majority) (Aggarwal et al. 2023).
ASC_CONFIDENCE = 0.95
#: The `gate` baseline's threshold (nats), chosen on the TRAIN banks (first 10 items of GSM8K and SVAMP
#: `train`, seed 0; docs/results.md, "The logprob gate") before any test item was scored: the most lenient
#: threshold of the sweep whose pooled accuracy equals the 5-vote's (15/20; -40 lost one SVAMP item). Alone,
#: GSM8K's train bank would take -40 and SVAMP's -30: the right value depends on the task.
GATE_LOGPROB = -30
#: The `cges` baseline's threshold on the posterior of the vote's answer: asc's 0.95, fixed before any item was
#: scored. A CoT reply's per-token probability is about 0.88 on the TRAIN banks (GSM8K, SVAMP, MultiArith `train`
#: items 1-20, seed 0: right replies' median 0.88, wrong ones' 0.86), so one reply alone gives its answer about
#: 0.88 and two agreeing about 0.98: at 0.95 an item stops after two agreeing voters, or at one whose reply is
#: surer than 0.95 per token. experiments/stop_curves.py sweeps it.
CGES_POSTERIOR = 0.95
#: Voters of a vote team by default (sc-cot's five), and at most: the vote agent takes one of MAX_AGENTS.
VOTERS = 5
MOST_VOTERS = MAX_AGENTS - 1


def _sc_cot(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    primary = kind.roles[1]
    workers = tuple(Agent(name=f"cot_{i}", role=primary, duty=COT_DUTY, capacity=level)
                    for i in range(1, n + 1))
    vote = Agent(name="vote", role="majority_vote", duty="", capacity=level,
                 depends_on=tuple(a.name for a in workers))
    return Spec(agents=(*workers, vote), output="vote")


def stopping_vote(kind: AnswerKind, level: str, n: int, rule: StopRule) -> Spec:
    """sc-cot's team whose vote stops asking once `rule` fires: its voters are a prefix of sc-cot's (the
    same samples, see `runtime.executor.sample_slot`), so the comparison with sc-cot is paired."""
    team = _sc_cot(kind, level, n, 0)
    vote = team.agents[-1].model_copy(update={"stop": rule})
    return team.model_copy(update={"agents": (*team.agents[:-1], vote)})


def _stopping(rule: StopRule) -> Builder:
    """The builder of sc-cot's team under `rule`."""

    def build(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
        return stopping_vote(kind, level, n, rule)

    return build


def _vote(name: str, description: str, build: Builder, *, scores_replies: bool = False,
          runs_examples: bool = False) -> BaselineKind:
    """A vote team: `VOTERS` voters by default, at most `MOST_VOTERS`."""
    return BaselineKind(name, description, build, default_n=VOTERS, most_n=MOST_VOTERS,
                        scores_replies=scores_replies, runs_examples=runs_examples)


BASELINES = (
    _vote("sc-cot", "self-consistency: n CoT voters, then a majority vote", _sc_cot),
    _vote("esc", "sc-cot's vote that stops once 2 voters agree (ESC)", _stopping(StopRule(agree=2))),
    _vote("asc", "sc-cot's vote that stops at a Beta posterior of the majority >= 0.95 (Adaptive-Consistency)",
          _stopping(StopRule(confidence=ASC_CONFIDENCE))),
    _vote("gate", "esc behind a logprob gate: a voter the model was sure of is taken alone",
          _stopping(StopRule(agree=2, logprob=GATE_LOGPROB)), scores_replies=True),
    _vote("cges", "sc-cot's vote that stops at a confidence-weighted posterior >= 0.95 (CGES)",
          _stopping(StopRule(posterior=CGES_POSTERIOR)), scores_replies=True),
    _vote("exsc", "sc-cot's vote behind the examples gate: the first program passing the task's examples",
          _stopping(StopRule(examples=True)), runs_examples=True),
)
