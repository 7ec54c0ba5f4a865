"""Program teams (program of thought, number benchmarks only): `pot`, `sc-pot`, `pot-esc`, `mixed-esc` and
`cross-check`, and `voter_team`, which writes any order of program (P) and CoT (C) voters that stop once 2 agree
(the sample bank's teams: `evaluation.bank`, the bank teachers and `experiments/stop_rules_table.py`)."""

from __future__ import annotations

from lemon.evaluation.baselines.base import COT_DUTY, BaselineKind, Builder
from lemon.orchestrator.kinds import AnswerKind, answer_kind, find_kind
from lemon.spec.model import Agent, Spec, StopRule

#: The longest written order `voter_team` takes: the sample bank's voters per (item, seed) (`bank.BANK_VOTERS`,
#: which imports this module), so every order is answered by the bank.
MAX_ORDER = 5


def program_role(kind: str) -> str | None:
    """The program-of-thought role of an answer kind, or None: only a number is what a program prints."""
    found = find_kind(kind)
    return found.program_role if found is not None else None


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
    roles = {"P": (program_role(kind) or "", "pot", ""), "C": (answer_kind(kind).roles[1], "cot", COT_DUTY)}
    agents = [Agent(name=f"{roles[x][1]}_{order[:i + 1].count(x)}", role=roles[x][0], duty=roles[x][2],
                    capacity=level) for i, x in enumerate(order)]
    if len(agents) == 1:
        return Spec(agents=tuple(agents), output=agents[0].name)
    vote = Agent(name="vote", role="majority_vote", capacity=level, depends_on=tuple(a.name for a in agents),
                 stop=StopRule(agree=2, logprob=gate))
    return Spec(agents=(*agents, vote), output="vote")


def _pot(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    return Spec(agents=(Agent(name="solver", role=kind.program_role or "", duty="", capacity=level),),
                output="solver")


def _pot_esc(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    """Program voters that stop once 2 agree (`PP...P`)."""
    return voter_team(kind.name, level, "P" * n)


def _sc_pot(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    """Self-consistency over `n` program voters `pot_1..pot_n` (PAL with a majority vote): `pot-esc` without
    its stop rule."""
    team = _pot_esc(kind, level, n, seed)
    return team.model_copy(update={"agents": (*team.agents[:-1], team.agents[-1].model_copy(update={"stop": None}))})


def _mixed_esc(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    """Two program voters, then `n - 2` CoT voters (`PPC...C`); the vote stops once 2 agree. Programs are cheap,
    so an item whose two programs agree costs two programs; where they disagree, prose voters (whose errors
    differ from a program's) break the tie."""
    return voter_team(kind.name, level, "PP" + "C" * (n - 2))


def _cross_check(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    """The program cross-check (`CPC...C`): CoT voter 1, then program voter 1; the vote stops if they agree,
    else CoT voters run until any 2 of the answers so far agree. Its voters are the first CoT and program
    samples of sc-cot and sc-pot (`voter_team`), so the comparison with both is paired."""
    return voter_team(kind.name, level, "CP" + "C" * (n - 2))


def _programs(name: str, description: str, build: Builder, *, least_n: int = 2) -> BaselineKind:
    """A team of program voters: 5 by default, at most the bank's `MAX_ORDER` (`voter_team`'s orders)."""
    return BaselineKind(name, description, build, default_n=MAX_ORDER, least_n=least_n, most_n=MAX_ORDER,
                        program_voters=True, instead="cot or esc")


BASELINES = (
    BaselineKind("pot", "one program_solver agent whose program the sandbox runs for its answer", _pot,
                 program_voters=True, instead="cot or esc"),
    _programs("sc-pot", "self-consistency over n program voters (PAL with a majority vote)", _sc_pot),
    _programs("pot-esc", "program voters that stop once 2 agree", _pot_esc),
    # two programs and a prose voter; the cross-check: a prose voter, a program and one to break a tie
    _programs("mixed-esc", "two program voters, then CoT voters, stop once 2 agree", _mixed_esc, least_n=3),
    _programs("cross-check", "a CoT voter, then a program voter; stop if they agree, else esc over CoT voters",
              _cross_check, least_n=3),
)
