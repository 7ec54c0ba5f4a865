"""`posterior: c`: stop once the answer the vote gives has a confidence-weighted posterior >= c (after CGES,
Confidence-Guided Early Stopping, arXiv 2511.02603: each sample's answer is evidence weighted by the model's
confidence in it, and sampling halts once one answer holds enough posterior mass).

The confidence of one reply is its per-token probability under the model that wrote it: for a reply of n
completion tokens whose summed log-probability is L nats (read from the generation, else one scoring pass:
`StopView.score`), w = exp(L / n), the geometric mean of its tokens' probabilities, clamped to [W_LOW, W_HIGH]
so that no single reply is certain. A reply whose model gave no score (a parent that calls no model) has w = 1/2:
no evidence either way.

The posterior: the hypotheses are "answer a is right", for each distinct answer a among the replies so far, and
"none of them is right"; the prior is uniform over them. Reading w as the probability that a reply is right, a
reply that answers a has likelihood w under "a is right" and 1 - w under every other hypothesis (a reply with
no answer has 1 - w under all, so it moves nothing). Dividing by the product of every reply's 1 - w:

    S_a = sum over the replies answering a of logit(w),   logit(w) = log(w / (1 - w)),
    P(a is right | replies) = exp(S_a) / (1 + sum over answers b of exp(S_b)).

One reply of confidence w gives its answer w; k replies agreeing at w each give w^k / (w^k + (1 - w)^k) when
no other answer was seen. The vote itself stays a majority vote (`majority_vote`: the most common answer, ties
to the earliest parent), so the rule asks the posterior of the answer the vote would give: it never stops on an
answer the vote would not give (where a rarer but surer answer leads the posterior, the voters go on). Needs a
pool whose levels score replies, as the `logprob` gate does; one reply may decide (the rule is first asked after
one parent)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from lemon.spec.stops.base import StopCriterion, StopView

#: The bounds of a reply's confidence: no reply is certain either way (logit(W_HIGH) is about 13.8 nats).
W_LOW, W_HIGH = 1e-6, 1 - 1e-6
#: How far one notch moves the threshold.
POSTERIOR_STEP = 0.05
_LOW, _HIGH = 0.5, 0.99


def reply_weight(logprob: float | None, tokens: int) -> float:
    """A reply's confidence: exp(logprob / tokens), the per-token probability, clamped to [W_LOW, W_HIGH];
    1/2 (no evidence) when it has no score. An empty reply counts as one token."""
    if logprob is None:
        return 0.5
    return min(max(math.exp(logprob / max(tokens, 1)), W_LOW), W_HIGH)


def answer_posterior(answers: Sequence[str | None], weights: Sequence[float]) -> dict[str, float]:
    """P(a is right | replies) for each answer a given (the module docstring); what is left of 1 is the
    posterior that none of them is. Computed stably (log-sum-exp over the answers and "none")."""
    scores: dict[str, float] = {}
    for answer, w in zip(answers, weights, strict=True):
        if answer is not None:
            scores[answer] = scores.get(answer, 0.0) + math.log(w / (1 - w))
    top = max([0.0, *scores.values()])
    norm = math.exp(-top) + sum(math.exp(s - top) for s in scores.values())
    return {a: math.exp(s - top) / norm for a, s in scores.items()}


def vote_winner(answers: Sequence[str | None]) -> str | None:
    """The answer a majority vote gives: the most common, ties to the one given first (None: no answer)."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == best)


def winner_posterior(answers: Sequence[str | None], weights: Sequence[float]) -> float:
    """The posterior of the answer the vote gives (0 when no reply has an answer)."""
    winner = vote_winner(answers)
    return 0.0 if winner is None else answer_posterior(answers, weights)[winner]


class Posterior(StopCriterion):
    key = "posterior"
    kind = "criterion"
    value_type = Annotated[float, Field(ge=_LOW, le=_HIGH)]
    phrase = hint = "posterior (a probability)"

    def render(self, value: Any) -> str:
        return f"posterior: {value!r}"

    def least_parents(self, value: Any) -> int | None:
        return 1

    def problem(self, value: Any, max_parents: int | None) -> str | None:
        if round(value, 2) != value:
            return "posterior has at most two decimals, e.g. 0.95"
        return None

    def variants(self, value: Any, limit: int) -> list[Any]:
        """c - 0.05 and c + 0.05, within [0.5, 0.99]."""
        return [c for c in (round(value - POSTERIOR_STEP, 2), round(value + POSTERIOR_STEP, 2)) if _LOW <= c <= _HIGH]

    def describe(self, old: Any, new: Any) -> str:
        if old == new or old is None or new is None:
            return ""
        return (f"; the vote stops {'later' if new > old else 'sooner'}: once its answer's confidence-weighted "
                f"posterior is >= {new} instead of >= {old}")

    def fires(self, value: Any, keys: Sequence[str | None]) -> bool:
        raise NotImplementedError("posterior weighs each reply by its log-probability: ask `decides` with a run's "
                                  "view, not `fires` with the answers alone")

    async def refusal(self, value: Any, view: StopView, voter: str, parents: Sequence[str]) -> str | None:
        return view.scoring_refusal(voter, parents, "posterior criterion")

    async def decides(self, value: Any, view: StopView, parents: Sequence[str]) -> bool:
        answers = view.keys(parents)
        weights = [reply_weight(await view.score(p), view.reply(p).tokens) for p in parents]
        return winner_posterior(answers, weights) >= value


CRITERIA = (Posterior(),)
