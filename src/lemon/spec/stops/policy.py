"""A learned stop rule's policy: after each parent of a vote returns, stop, run the next voter, or verify.

The run holds, at that moment, each finished parent's answer (its vote key), the reply's log-probability
(read from the generation: `llm.embedded.SampledLogprobs`), its length and whether it was cut at the reply
limit, and which voters are left of each kind (prose voters; program voters, which verify a prose answer by
computing it). `Moment` is that state; `features` turns it into a fixed vector; a `StopPolicy` is a calibrated
probability that the leading answer is right, P(right | features), and two thresholds on it:

- P >= `stop_at`: stop with the leading answer;
- else, if a program voter is left and P >= `verify_at`: run it (its answer agreeing with the leader's is the
  strongest evidence there is; disagreeing, the next decision sees that);
- else run the next prose voter (a program voter when no prose one is left); with none left, stop.

A policy of format 2 may also name its `opening` (the voter a run opens with, decided before any reply: a prose or
a program one; format 1 runs the team's first written voter) and `agree`, a floor it stops at whatever the
probability: the leading answer has that many votes (the agree-k rule, e.g. esc's 2, as one learned choice). It
reads the log-probabilities of prose replies only (`prose_logprobs_only`): a program voter is judged by the answer
its program printed, and the training banks hold program replies drawn before replies carried one, so a policy
that read them would meet on new draws a signal it never saw.

A policy is a small JSON file, one per answer kind, shipped in `policies/` (`packaged_policy`; the template
writes `stop: {learned: number}`), learned from the sample bank by `lemon.train.stop_learning` (a cost-sensitive
classifier: the logistic model is fit on every moment of the training items' draws, the thresholds chosen for
expected accuracy minus a token price over draw orders; `experiments/learn_stop_rule.py` rebuilds the files).
Every function here is pure, so the runtime (through `learned.py`, the rule's criterion) and the learner's
simulator take the same decisions from the same draws.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from lemon.errors import ConfigError
from lemon.files import read_regular

Action = Literal["stop", "prose", "verify"]
#: The voter a run opens with: a prose one or a program one (where the team has one).
Opening = Literal["prose", "program"]
OPENINGS: tuple[Opening, ...] = ("prose", "program")
ACTIONS: tuple[Action, ...] = ("stop", "prose", "verify")
MAX_POLICY_BYTES = 64 * 1024
POLICIES = Path(__file__).with_name("policies")
#: Policies on trial: packaged and runnable by name, but not offered to the orchestrator's grammar (which lists
#: `POLICIES`' own files) until judged; offering one is moving its file up.
TRIAL = POLICIES / "trial"
FORMATS = ("lemon-stop-policy/1", "lemon-stop-policy/2")
#: A policy's name: what `stop: {learned: NAME}` writes, and its file `policies/NAME.json`.
POLICY_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
#: Voters a policy's features are scaled by (a vote team of the bank has 5 of each kind).
SCALE_VOTERS = 5

FEATURES: tuple[str, ...] = (
    "bias", "voters_run", "top_share", "margin", "agree_2", "agree_3", "distinct_share", "no_answer_share",
    "leader_mean_logprob", "leader_best_logprob", "logprob_known", "leader_cut", "other_cut",
    "leader_length", "program_agrees", "program_disagrees", "prose_left", "programs_left", "task_length",
)


@dataclass(frozen=True, slots=True)
class Reply:
    """One finished parent as the rule sees it: a prose or a program voter's answer (None: none found)."""

    program: bool
    answer: str | None
    logprob: float | None
    tokens: int
    cut: bool


@dataclass(frozen=True, slots=True)
class Moment:
    """What the runtime holds when a parent returns: the replies so far, in the order they ran, and the task."""

    replies: tuple[Reply, ...]
    prose_left: int
    programs_left: int
    task_chars: int

    def leader(self) -> str | None:
        """The leading answer: the most common, ties to the one given first (`majority_vote`'s rule)."""
        counts = Counter(r.answer for r in self.replies if r.answer is not None)
        if not counts:
            return None
        top = max(counts.values())
        return next(r.answer for r in self.replies if r.answer is not None and counts[r.answer] == top)

    def leader_votes(self) -> int:
        """How many replies give the leading answer (0 with none): what an agree-k rule reads."""
        return max(Counter(r.answer for r in self.replies if r.answer is not None).values(), default=0)


def prose_logprobs_only(m: Moment) -> Moment:
    """The moment as a format-2 policy sees it: program replies without their log-probability."""
    if not any(r.program and r.logprob is not None for r in m.replies):
        return m
    replies = tuple(replace(r, logprob=None) if r.program else r for r in m.replies)
    return replace(m, replies=replies)


def features(m: Moment) -> list[float]:
    """The moment as FEATURES, each scaled to about [-1, 1]."""
    k = len(m.replies)
    answered = [r.answer for r in m.replies if r.answer is not None]
    counts = [*sorted(Counter(answered).values(), reverse=True), 0, 0]
    leader = m.leader()
    led = [r for r in m.replies if leader is not None and r.answer == leader]
    known = [r for r in led if r.logprob is not None]
    per_token = [r.logprob / max(r.tokens, 1) for r in known if r.logprob is not None]
    totals = [r.logprob for r in known if r.logprob is not None]
    programs = [r for r in m.replies if r.program and r.answer is not None]
    return [
        1.0, k / SCALE_VOTERS, counts[0] / max(k, 1), (counts[0] - counts[1]) / max(k, 1),
        float(counts[0] >= 2), float(counts[0] >= 3), len(set(answered)) / max(k, 1),
        (k - len(answered)) / max(k, 1),
        max(-3.0, sum(per_token) / len(per_token)) if per_token else 0.0,
        max(-3.0, max(totals) / 100) if totals else 0.0, float(bool(known)),
        float(any(r.cut for r in led)), float(any(r.cut for r in m.replies if r not in led)),
        min(r.tokens for r in led) / 1000 if led else 0.0,
        float(any(r.answer == leader for r in programs)), float(any(r.answer != leader for r in programs)),
        m.prose_left / SCALE_VOTERS, m.programs_left / SCALE_VOTERS, math.log1p(m.task_chars) / 10,
    ]


@dataclass(frozen=True, slots=True)
class StopPolicy:
    """A learned stop rule: logistic weights over FEATURES, the two thresholds, and (format 2) its opening voter and
    agreement floor (see the module). `opening` None: the team's first written voter (format 1)."""

    name: str
    weights: tuple[float, ...]
    stop_at: float
    verify_at: float
    opening: Opening | None = None
    agree: int | None = None

    def probability(self, m: Moment) -> float:
        """P(the leading answer is right | the moment as this policy's format sees it)."""
        seen = m if self.opening is None else prose_logprobs_only(m)
        z = sum(w * x for w, x in zip(self.weights, features(seen), strict=True))
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    def decide(self, m: Moment) -> tuple[Action, float]:
        """The action at `m` and the probability it was taken on."""
        p = self.probability(m)
        return self.action(p, m), p

    def action(self, p: float, m: Moment) -> Action:
        """The action at `m` for P(leader right) = p: stop when sure enough or when no voter is left, verify when
        unsure but not hopeless and a program voter is left (or only program voters are), else a prose voter."""
        if (not m.prose_left and not m.programs_left) or p >= self.stop_at:
            return "stop"
        if self.agree is not None and m.leader_votes() >= self.agree:
            return "stop"
        if m.programs_left and (p >= self.verify_at or not m.prose_left):
            return "verify"
        return "prose"

    def to_json(self) -> dict[str, object]:
        """Format 1 where the policy has neither an opening nor a floor (so format-1 files rebuild byte for byte),
        else format 2."""
        data: dict[str, object] = {"format": FORMATS[0], "name": self.name, "features": list(FEATURES),
                                   "weights": [round(w, 6) for w in self.weights], "stop_at": self.stop_at,
                                   "verify_at": self.verify_at}
        if self.opening is None and self.agree is None:
            return data
        return data | {"format": FORMATS[1], "opening": self.opening, "agree": self.agree}


def policy_from_json(data: object, where: str) -> StopPolicy:
    """A policy from its JSON form; a `ConfigError` naming `where` and the fault for anything else."""
    if not isinstance(data, dict) or data.get("format") not in FORMATS:
        raise ConfigError(f"{where}: not a LEMON stop policy (expected a JSON object with format "
                          f"{' or '.join(map(repr, FORMATS))}); rebuild it with experiments/learn_stop_rule.py")
    if data.get("features") != list(FEATURES):
        raise ConfigError(f"{where}: its features are not this version's ({len(FEATURES)} named in "
                          "lemon.spec.stops.policy.FEATURES); rebuild it with experiments/learn_stop_rule.py")
    weights, name = data.get("weights"), data.get("name")
    numbers = isinstance(weights, list) and all(_finite(w) and abs(w) <= 1e4 for w in weights)
    if not numbers or len(weights) != len(FEATURES):  # type: ignore[arg-type]
        raise ConfigError(f"{where}: weights must be {len(FEATURES)} finite numbers of at most 1e4 in size")
    stop_at, verify_at = data.get("stop_at"), data.get("verify_at")
    if not (_finite(stop_at) and _finite(verify_at) and 0 <= verify_at <= stop_at <= 1):  # type: ignore[operator]
        raise ConfigError(f"{where}: stop_at and verify_at must be probabilities with verify_at <= stop_at")
    if not isinstance(name, str) or not POLICY_NAME.match(name):
        raise ConfigError(f"{where}: name must be 1 to 40 lower-case letters, digits, - or _, starting with a letter")
    opening, agree = _second_format(data, where)
    return StopPolicy(name, tuple(float(w) for w in weights), float(stop_at), float(verify_at),  # type: ignore
                      opening, agree)


def _second_format(data: dict[str, object], where: str) -> tuple[Opening | None, int | None]:
    """Format 2's opening and agreement floor (format 1 has neither; a format-1 file naming them is refused, so a
    field is never silently ignored)."""
    if data["format"] == FORMATS[0]:
        if "opening" in data or "agree" in data:
            raise ConfigError(f"{where}: 'opening' and 'agree' are format 2's; write format "
                              f"'{FORMATS[1]}' or drop them")
        return None, None
    opening, agree = data.get("opening"), data.get("agree")
    if opening not in OPENINGS:
        raise ConfigError(f"{where}: opening must be one of {', '.join(OPENINGS)}")
    if agree is not None and (not isinstance(agree, int) or isinstance(agree, bool) or not 2 <= agree <= 10):
        raise ConfigError(f"{where}: agree must be null or a whole number of votes from 2 to 10")
    return opening, agree


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def load_policy(path: Path) -> StopPolicy:
    """A policy file, read through the guarded opener (regular file, size-bounded), validated."""
    raw = read_regular(path, what="stop policy", limit=MAX_POLICY_BYTES, error=ConfigError)
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc}); rebuild it with experiments/learn_stop_rule.py") from None
    return policy_from_json(data, str(path))


def policy_names() -> list[str]:
    """The packaged policies offered to the orchestrator (the grammar lists these; trial ones are not)."""
    return sorted(p.stem for p in POLICIES.glob("*.json"))


def trial_names() -> list[str]:
    """The packaged policies on trial: runnable by name (`stop: {learned: NAME}`), not offered until judged."""
    return sorted(p.stem for p in TRIAL.glob("*.json"))


def _policy_file(name: str) -> Path | None:
    if not POLICY_NAME.match(name):
        return None
    return next((f for f in (POLICIES / f"{name}.json", TRIAL / f"{name}.json") if f.is_file()), None)


def answer_kind_of(name: str) -> str:
    """The answer kind a policy was learned for: its name up to the first `-` (`number`, `number-cheap`)."""
    return name.split("-", 1)[0]


def packaged_policy(name: str) -> StopPolicy:
    """The packaged policy `name` (`stop: {learned: NAME}`); a `ConfigError` names the ones there are."""
    if (path := _policy_file(name)) is None:
        trial = f" (on trial: {', '.join(trial_names())})" if trial_names() else ""
        raise ConfigError(f"no learned stop policy {name!r}; the packaged ones are: {', '.join(policy_names())}"
                          f"{trial}")
    policy = load_policy(path)
    if policy.name != name:
        raise ConfigError(f"{path}: names itself {policy.name!r}; rebuild it with experiments/learn_stop_rule.py")
    return policy
