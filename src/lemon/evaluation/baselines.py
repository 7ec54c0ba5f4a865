"""Baselines as specs: each method is a spec on the same runtime and pools; methods differ ONLY in their spec.

That is the point of this module. A baseline is not separate code with its own prompts, retries or parsing;
it is a fixed `Spec` executed by the same `Executor` on the same pool, with the same task prompt, answer
extraction and checker as LEMON's own specs. Any difference in accuracy or tokens is then due to the
topology and roles alone.

Roles come from the role library, chosen by the benchmark's answer kind. A "team" of four roles is used:

| kind     | first (root)   | primary (solver)   | checker   | final                  |
|----------|----------------|--------------------|-----------|------------------------|
| `number` | `analyst`      | `math_solver`      | `critic`  | `final_decision_maker` |
| `choice` | `analyst`      | `knowledge_expert` | `critic`  | `final_decision_maker` |
| `code`   | `planner`      | `programmer`       | `tester`  | `final_decision_maker` |

Shapes (every agent at the same `level` capacity; arrows point from a parent to the agent reading it):

- `vanilla`: one agent, `solver` = primary role, empty duty (the base role as is).
- `cot`: one agent, primary role, duty "Think step by step, then give the final answer."
- `sc-cot` (self-consistency): `n` (default 5) CoT agents `cot_1..cot_n`, all parallel, then `vote`, a
  `majority_vote` agent depending on all of them. The vote is deterministic (no model call): the runtime
  extracts each parent's answer with the benchmark's extractor and picks the most common one. Samples must
  differ per agent: the runtime derives a per-agent seed when temperature > 0 (at temperature 0 the five
  agents would be identical, so evaluate with the default sampling temperature). For `code` the vote is over
  the extracted code text, so it only helps when several samples are identical.
- `esc` and `asc` (the adaptive-stopping anchors): sc-cot's team whose vote carries a stop rule, so its
  voters run in order only until the answer is settled: `esc` stops once 2 voters agree (Early-Stopping
  Self-Consistency, Li et al. ICLR 2024, with a window of 2), `asc` once the leading answer is the majority
  with Beta posterior >= 0.95 (Adaptive-Consistency, Aggarwal et al. EMNLP 2023); both at most `n` (5).
- `gate` (ours): `esc` behind a logprob gate, `stop: {agree: 2, logprob: GATE_LOGPROB}`: a voter whose reply
  the model was sure of (summed token log-probability >= the threshold) is taken alone, so an easy item costs
  one voter, not the two that agreement needs. Needs a pool whose levels can score replies (embedded).
- `cges`: sc-cot's team whose vote stops once the answer it gives has a confidence-weighted posterior >=
  `CGES_POSTERIOR`, `stop: {posterior: c}` (after CGES, Confidence-Guided Early Stopping, arXiv 2511.02603: each
  voter's answer weighed by its reply's per-token probability, `lemon.spec.stops.posterior`); at most `n` (5).
  Like `gate`, it needs a pool whose levels can score replies.
- `exsc` (ours, code benchmarks only): sc-cot's team whose vote carries the `examples` gate, `stop: {examples:
  true}`: voters run one at a time, and the first whose program passes the examples the task's docstring shows
  (run in the sandbox, `lemon.runtime.examples_gate`) is taken alone; with none passing, the five programs'
  vote stands, as in sc-cot. Its voters are sc-cot's (the same samples), so the comparison is paired.
- `pot`, `sc-pot` and `pot-esc` (program of thought, number benchmarks only): `pot` is one `program_solver`
  agent, whose reply is a Python program that the runtime runs in the sandbox for its answer
  (`lemon.runtime.programs`); `sc-pot` is sc-cot with program voters (PAL with a majority vote, 5 voters),
  `pot-esc` is `esc` with program voters (stop once 2 of at most 5 agree); `mixed-esc` asks two program
  voters, then CoT voters, and stops once 2 agree (prose breaks a tie between programs); `cross-check` is the
  program cross-check as a fixed rule: a CoT voter, then a program voter, stop if their answers agree, else go
  on with CoT voters until any 2 answers agree (esc over the rest, the program's answer counted), at most `n`
  (5): `voter_team`'s `CPCCC`, the rule `experiments/learn_stop_rule.py` restates as "program cross-check". A
  program costs a fraction of a prose solution's tokens (docs/results.md, "Program voters").
- `chain`: `n` (default 3) agents in sequence: primary -> checker -> final (for n > 3, extra checkers
  are inserted before the final agent; n = 2 is primary -> final).
- `tree`: `root` (first role: analysis / plan) fans out to two workers `worker_1`, `worker_2` (primary role,
  each with its own duty so they do not produce the same text at temperature 0), then `aggregator`
  (final role) reads both workers:

      root -> worker_1 -> aggregator
      root -> worker_2 -> aggregator

- `complete`: `n` (default 4) agents; agent i depends on EVERY earlier agent (a fully connected DAG).
  Roles, in order: first, primary, checker, final (extra agents repeat the primary role).
- `random`: `n` (default 4) agents with the `complete` roles, each forward edge i -> j (i < j) kept with
  probability 1/2 from `random.Random(seed)`; then every agent other than the last that has no child gets an
  edge to the last agent, so the last agent is the single sink and the answer. Same seed, same graph.

`method_names()` lists these names; `baseline_spec(method, kind, level=..., seed=..., n=...)` builds one.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from lemon.errors import LemonError
from lemon.orchestrator.kinds import answer_kind, find_kind
from lemon.spec.model import MAX_AGENTS, Agent, Spec, StopRule

COT_DUTY = "Think step by step, then give the final answer."

DEFAULT_N: dict[str, int] = {"sc-cot": 5, "esc": 5, "asc": 5, "gate": 5, "cges": 5, "exsc": 5, "sc-pot": 5,
                             "pot-esc": 5, "mixed-esc": 5, "cross-check": 5, "chain": 3, "complete": 4, "random": 4}
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
# the vote agent takes one of MAX_AGENTS
_VOTES = ("sc-cot", "esc", "asc", "gate", "cges", "exsc", "sc-pot", "pot-esc", "mixed-esc", "cross-check")
_PROGRAM_METHODS = ("pot", "sc-pot", "pot-esc", "mixed-esc", "cross-check")  # number benchmarks only
_CODE_METHODS = ("exsc",)  # code benchmarks only: the examples are a function's
#: The longest written order `voter_team` takes: the sample bank's voters per (item, seed) (`bank.BANK_VOTERS`,
#: which imports this module), so every order is answered by the bank.
MAX_ORDER = 5


def _team(kind: str) -> tuple[str, str, str, str]:
    """(first, primary, checker, final): the answer kind's roles (`orchestrator.kinds`; the module docstring)."""
    return answer_kind(kind).roles


def program_role(kind: str) -> str | None:
    """The program-of-thought role of an answer kind, or None: only a number is what a program prints."""
    found = find_kind(kind)
    return found.program_role if found is not None else None


def _vanilla(kind: str, level: str, n: int, seed: int) -> Spec:
    return Spec(agents=(Agent(name="solver", role=_team(kind)[1], duty="", capacity=level),), output="solver")


def _cot(kind: str, level: str, n: int, seed: int) -> Spec:
    return Spec(agents=(Agent(name="solver", role=_team(kind)[1], duty=COT_DUTY, capacity=level),),
                output="solver")


def _sc_cot(kind: str, level: str, n: int, seed: int) -> Spec:
    primary = _team(kind)[1]
    workers = tuple(Agent(name=f"cot_{i}", role=primary, duty=COT_DUTY, capacity=level)
                    for i in range(1, n + 1))
    vote = Agent(name="vote", role="majority_vote", duty="", capacity=level,
                 depends_on=tuple(a.name for a in workers))
    return Spec(agents=(*workers, vote), output="vote")


def _stopping_vote(kind: str, level: str, n: int, rule: StopRule) -> Spec:
    """sc-cot's team whose vote stops asking once `rule` fires: its voters are a prefix of sc-cot's (the
    same samples, see `runtime.executor.sample_slot`), so the comparison with sc-cot is paired."""
    team = _sc_cot(kind, level, n, 0)
    vote = team.agents[-1].model_copy(update={"stop": rule})
    return team.model_copy(update={"agents": (*team.agents[:-1], vote)})


def _esc(kind: str, level: str, n: int, seed: int) -> Spec:
    return _stopping_vote(kind, level, n, StopRule(agree=2))


def _asc(kind: str, level: str, n: int, seed: int) -> Spec:
    return _stopping_vote(kind, level, n, StopRule(confidence=ASC_CONFIDENCE))


def _gate(kind: str, level: str, n: int, seed: int) -> Spec:
    return _stopping_vote(kind, level, n, StopRule(agree=2, logprob=GATE_LOGPROB))


def _cges(kind: str, level: str, n: int, seed: int) -> Spec:
    return _stopping_vote(kind, level, n, StopRule(posterior=CGES_POSTERIOR))


def _exsc(kind: str, level: str, n: int, seed: int) -> Spec:
    if not answer_kind(kind).runs_examples:
        raise LemonError(f"exsc runs programs on a code task's examples: it answers code benchmarks only, not "
                         f"{kind!r} ones; use esc there")
    return _stopping_vote(kind, level, n, StopRule(examples=True))


def _program_role(kind: str) -> str:
    if (role := answer_kind(kind).program_role) is None:
        raise LemonError(f"the program-of-thought baselines answer number benchmarks only, not {kind!r} ones; "
                         "use cot or esc there")
    return role


def _pot(kind: str, level: str, n: int, seed: int) -> Spec:
    return Spec(agents=(Agent(name="solver", role=_program_role(kind), duty="", capacity=level),), output="solver")


def voter_team(kind: str, level: str, order: str, gate: int | None = None) -> Spec:
    """Program (P) and prose CoT (C) voters at `level` in written `order` ("PCCCC": a program, then four CoT
    voters), and a vote that stops once 2 agree, or (with `gate`) at the first voter whose reply scores at least
    `gate` nats, taken alone; one letter alone is that one agent. The k-th voter of each role is that role's k-th
    sample (`runtime.executor.sample_slot`), so `PPPPP` (`pot-esc`) is a prefix of sc-pot's voters and `C` sends
    `cot`'s request. A `ValueError` names a bad order (letters other than P and C, or more than `MAX_ORDER`), a gate on
    one agent, or a benchmark kind without program voters."""
    if not order or set(order) - {"P", "C"} or len(order) > MAX_ORDER:
        raise ValueError(f"an order is 1 to {MAX_ORDER} letters P (program) or C (CoT), got {order!r}")
    if "P" in order and program_role(kind) is None:
        raise ValueError(f"program voters answer number benchmarks only, not {kind!r} ones")
    if gate is not None and len(order) == 1:
        raise ValueError(f"a gate needs a vote to stop: give 2 or more voters, not {order!r}")
    roles = {"P": (program_role(kind) or "", "pot", ""), "C": (_team(kind)[1], "cot", COT_DUTY)}
    agents = [Agent(name=f"{roles[x][1]}_{order[:i + 1].count(x)}", role=roles[x][0], duty=roles[x][2],
                    capacity=level) for i, x in enumerate(order)]
    if len(agents) == 1:
        return Spec(agents=tuple(agents), output=agents[0].name)
    vote = Agent(name="vote", role="majority_vote", capacity=level, depends_on=tuple(a.name for a in agents),
                 stop=StopRule(agree=2, logprob=gate))
    return Spec(agents=(*agents, vote), output="vote")


def _sc_pot(kind: str, level: str, n: int, seed: int) -> Spec:
    """Self-consistency over `n` program voters `pot_1..pot_n` (PAL with a majority vote): `pot-esc` without
    its stop rule."""
    team = _pot_esc(kind, level, n, seed)
    return team.model_copy(update={"agents": (*team.agents[:-1], team.agents[-1].model_copy(update={"stop": None}))})


def _pot_esc(kind: str, level: str, n: int, seed: int) -> Spec:
    """Program voters that stop once 2 agree (`PP...P`)."""
    _program_role(kind)
    return voter_team(kind, level, "P" * n)


def _mixed_esc(kind: str, level: str, n: int, seed: int) -> Spec:
    """Two program voters, then `n - 2` CoT voters (`PPC...C`); the vote stops once 2 agree. Programs are cheap,
    so an item whose two programs agree costs two programs; where they disagree, prose voters (whose errors
    differ from a program's) break the tie."""
    _program_role(kind)
    return voter_team(kind, level, "PP" + "C" * (n - 2))


def _cross_check(kind: str, level: str, n: int, seed: int) -> Spec:
    """The program cross-check (`CPC...C`): CoT voter 1, then program voter 1; the vote stops if they agree,
    else CoT voters run until any 2 of the answers so far agree. Its voters are the first CoT and program
    samples of sc-cot and sc-pot (`voter_team`), so the comparison with both is paired."""
    _program_role(kind)
    return voter_team(kind, level, "CP" + "C" * (n - 2))


def _chain(kind: str, level: str, n: int, seed: int) -> Spec:
    _, primary, checker, final = _team(kind)
    roles = [primary, *([checker] * max(0, n - 2)), final]
    names = ["solver", *[f"checker_{i}" if n > 3 else "checker" for i in range(1, n - 1)], "final"]
    agents = []
    for i, (name, role) in enumerate(zip(names, roles, strict=True)):
        agents.append(Agent(name=name, role=role, duty="", capacity=level,
                            depends_on=(names[i - 1],) if i else ()))
    return Spec(agents=tuple(agents), output="final")


def _tree(kind: str, level: str, n: int, seed: int) -> Spec:
    first, primary, _, final = _team(kind)
    return Spec(
        agents=(
            Agent(name="root", role=first, duty="", capacity=level),
            Agent(name="worker_1", role=primary,
                  duty="Solve the task directly, using the notes you are given.",
                  capacity=level, depends_on=("root",)),
            Agent(name="worker_2", role=primary,
                  duty="Solve the task by an independent route, then check the result.",
                  capacity=level, depends_on=("root",)),
            Agent(name="aggregator", role=final, duty="", capacity=level,
                  depends_on=("worker_1", "worker_2")),
        ),
        output="aggregator",
    )


def _team_roles(kind: str, n: int) -> list[str]:
    first, primary, checker, final = _team(kind)
    if n == 2:
        return [primary, final]
    if n == 3:
        return [first, primary, final]
    return [first, primary, *([primary] * (n - 4)), checker, final]


def _team_names(roles: list[str]) -> list[str]:
    return [f"a{i}_{role}"[:24].rstrip("_") for i, role in enumerate(roles, start=1)]


def _complete(kind: str, level: str, n: int, seed: int) -> Spec:
    roles = _team_roles(kind, n)
    names = _team_names(roles)
    agents = tuple(Agent(name=names[i], role=roles[i], duty="", capacity=level, depends_on=tuple(names[:i]))
                   for i in range(n))
    return Spec(agents=agents, output=names[-1])


def _random(kind: str, level: str, n: int, seed: int) -> Spec:
    roles = _team_roles(kind, n)
    names = _team_names(roles)
    rng = random.Random(seed)
    parents: list[list[str]] = [[] for _ in range(n)]
    for j in range(1, n):
        for i in range(j):
            if rng.random() < 0.5:
                parents[j].append(names[i])
    has_child = {p for ps in parents for p in ps}
    for i in range(n - 1):
        if names[i] not in has_child:
            parents[-1].append(names[i])
    parents[-1].sort(key=names.index)
    agents = tuple(Agent(name=names[i], role=roles[i], duty="", capacity=level, depends_on=tuple(parents[i]))
                   for i in range(n))
    return Spec(agents=agents, output=names[-1])


_BUILDERS: dict[str, Callable[[str, str, int, int], Spec]] = {
    "vanilla": _vanilla,
    "cot": _cot,
    "sc-cot": _sc_cot,
    "esc": _esc,
    "asc": _asc,
    "gate": _gate,
    "cges": _cges,
    "exsc": _exsc,
    "pot": _pot,
    "sc-pot": _sc_pot,
    "pot-esc": _pot_esc,
    "mixed-esc": _mixed_esc,
    "cross-check": _cross_check,
    "chain": _chain,
    "tree": _tree,
    "complete": _complete,
    "random": _random,
}


def supports(method: str, kind: str) -> bool:
    """Whether baseline `method` has a spec for benchmarks whose answers are of `kind` (the program-of-thought
    ones only for numbers, `exsc` only for code)."""
    found = find_kind(kind)
    if found is None:
        return False
    if method in _CODE_METHODS:
        return found.runs_examples
    return found.program_role is not None if method in _PROGRAM_METHODS else True


def method_names() -> tuple[str, ...]:
    """The baseline method names, in the order reports list them."""
    return tuple(_BUILDERS)


def baseline_spec(method: str, kind: str, *, level: str, seed: int = 0, n: int | None = None) -> Spec:
    """The fixed spec of baseline `method` for a benchmark whose answers are of `kind`.

    `n` is the number of agents (voters for sc-cot) for the sized methods (`DEFAULT_N`); None means the
    default, and it is ignored by the fixed shapes. `seed` only matters for `random` (the graph). The
    result is built from the spec model's own validated types; callers that know the pool still run
    `validate_spec` on it like on any other spec (the level must be one of the pool's).
    """
    builder = _BUILDERS.get(method)
    if builder is None:
        raise LemonError(f"unknown baseline {method!r}; valid: {', '.join(_BUILDERS)}")
    _team(kind)
    if method not in DEFAULT_N:  # fixed shapes: `n` does not apply
        return builder(kind, level, 0, seed)
    n = DEFAULT_N[method] if n is None else n
    high = MAX_AGENTS - 1 if method in _VOTES else MAX_AGENTS  # the vote agent takes one slot
    # mixed-esc: two programs and a prose voter; cross-check: a prose voter, a program and one to break a tie
    low = 3 if method in ("mixed-esc", "cross-check") else 2
    if not low <= n <= high:
        raise LemonError(f"baseline {method!r}: n must be in [{low}, {high}], got {n}")
    return builder(kind, level, n, seed)
