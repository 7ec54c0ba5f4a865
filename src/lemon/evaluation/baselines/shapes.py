"""Shapes of agents with distinct roles (the paper's fixed topologies): `chain`, `tree`, `complete`, `random`."""

from __future__ import annotations

import random

from lemon.evaluation.baselines.base import BaselineKind
from lemon.orchestrator.kinds import AnswerKind
from lemon.spec.model import Agent, Spec


def _chain(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    _, primary, checker, final = kind.roles
    roles = [primary, *([checker] * max(0, n - 2)), final]
    names = ["solver", *[f"checker_{i}" if n > 3 else "checker" for i in range(1, n - 1)], "final"]
    agents = []
    for i, (name, role) in enumerate(zip(names, roles, strict=True)):
        agents.append(Agent(name=name, role=role, duty="", capacity=level,
                            depends_on=(names[i - 1],) if i else ()))
    return Spec(agents=tuple(agents), output="final")


def _tree(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    first, primary, _, final = kind.roles
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


def _team_roles(kind: AnswerKind, n: int) -> list[str]:
    first, primary, checker, final = kind.roles
    if n == 2:
        return [primary, final]
    if n == 3:
        return [first, primary, final]
    return [first, primary, *([primary] * (n - 4)), checker, final]


def _team_names(roles: list[str]) -> list[str]:
    return [f"a{i}_{role}"[:24].rstrip("_") for i, role in enumerate(roles, start=1)]


def _complete(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
    roles = _team_roles(kind, n)
    names = _team_names(roles)
    agents = tuple(Agent(name=names[i], role=roles[i], duty="", capacity=level, depends_on=tuple(names[:i]))
                   for i in range(n))
    return Spec(agents=agents, output=names[-1])


def _random(kind: AnswerKind, level: str, n: int, seed: int) -> Spec:
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


BASELINES = (
    BaselineKind("chain", "n agents in sequence: primary -> checker(s) -> final", _chain, default_n=3),
    BaselineKind("tree", "a root fans out to two workers, read by an aggregator", _tree),
    BaselineKind("complete", "n agents, each reading every earlier one", _complete, default_n=4),
    BaselineKind("random", "n agents, each forward edge kept with probability 1/2 (seeded), one sink",
                 _random, default_n=4),
)
