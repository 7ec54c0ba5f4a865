"""The library teacher: SFT targets drawn from the fixed team library, one uniformly random team per task.

Why: SFT has two jobs, the canonical format and a prior over teams, and the prior it gets is the teacher's.
Both model teachers we measured taught a poor prior (the prompted `large` teacher: 104 of 160 specs with a
dead agent, a 2-agent team scoring below vanilla; the execution-verified one costs ~13 team executions per
task, hours on the CPU). The library teacher writes, for each task, ONE team drawn uniformly from the
default team and the fixed baselines at every level of the pool (`verified.candidate_specs`), with no model
call and no execution. It claims nothing about which team is best — the draw ignores the task — so the
SFT-only policy is an honest "format plus uniform prior" starting point, and everything it learns about
WHICH team and level to write for a task comes from GRPO's reward on real worker executions.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from lemon.seeds import stable_seed
from lemon.spec.model import Spec
from lemon.spec.roles import RoleLibrary
from lemon.train.tasks import TrainTask
from lemon.train.verified import candidate_specs


def library_targets(tasks: Sequence[TrainTask], roles: RoleLibrary, levels: Sequence[str], *,
                    seed: int = 0) -> tuple[list[tuple[TrainTask, str, Spec]], dict[str, int]]:
    """(task, team label, spec) per task, the team drawn by a stable hash of (seed, task id); label counts.

    The draw depends only on the seed and the task id, so the same tasks give the same data on any
    machine, and adding tasks never changes the targets of the others.
    """
    by_kind: dict[str, list[tuple[str, Spec]]] = {}
    out: list[tuple[TrainTask, str, Spec]] = []
    for task in tasks:
        candidates = by_kind.setdefault(task.kind, candidate_specs(task.kind, roles, levels))
        label, spec = random.Random(stable_seed(seed, "library", task.id)).choice(candidates)
        out.append((task, label, spec))
    return out, dict(Counter(label for _, label, _ in out))
