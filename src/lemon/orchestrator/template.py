"""The default orchestration: the task's answer kind picks a team from a data file, in no time.

Why not an LLM writing the spec by default: on the CPU pool the prompted orchestrator spent ~60 of a 68 s
`lemon run` writing the spec, and its teams scored below one chain-of-thought agent (30 % vs 52.5 % on
MultiArith), e.g. naming a middle agent as output so the strongest agent never ran. The teams here
(`prompts/teams.yaml`, with the reason for each) are fixed topologies chosen by measurement, mapped onto
the pool's levels; the prompted and trained orchestrators remain available behind the same interface.

The kind is read from the task text: a Python signature or code fence -> `code`; at least three lettered
options such as `(A) ...` / `B) ...` -> `choice`; anything else -> `number` (word problems). A code task's team
depends on the task too: five programmers behind its own examples when it shows examples the sandbox can run,
one programmer when it does not (`team_of`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any, Literal

from lemon.orchestrator.base import Proposal
from lemon.runtime.examples_gate import sandbox_missing, task_code, task_examples
from lemon.spec.model import Agent, Spec
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from lemon.yamlfile import load_yaml

Kind = Literal["number", "choice", "code"]
KINDS: tuple[Kind, ...] = ("number", "choice", "code")
#: A team of `prompts/teams.yaml`: one per kind, and one for code whose examples cannot be run (`team_of`).
Team = Literal["number", "choice", "code", "code_unchecked"]
TEAMS: tuple[Team, ...] = (*KINDS, "code_unchecked")

log = logging.getLogger(__name__)

_OPTION = re.compile(r"^\s*\(?([A-J])[).:]\s+\S", re.MULTILINE)


def task_kind(task: str) -> Kind:
    """`code`, `choice` or `number`, from the task text alone (see the module docstring). A code task is what
    the examples gate's reader (`task_code`) reads as one, so a function pasted without a fence is read the
    same way by both: its kind, its team and its examples."""
    if task_code(task) is not None:
        return "code"
    letters = [m.group(1) for m in _OPTION.finditer(task)]
    if len(letters) >= 3 and letters[:3] == ["A", "B", "C"]:
        return "choice"
    return "number"


@cache
def teams_data() -> dict[str, Any]:
    """The teams of `prompts/teams.yaml`, as data (what a template run's identity hashes)."""
    text = (resources.files("lemon.orchestrator") / "prompts" / "teams.yaml").read_text("utf-8")
    return load_yaml(text)



def teams_identity() -> str:
    """`teams:` and a hash of the teams as data (not the comments of their file): what a run's identity holds,
    so a run written by one team is never resumed by another."""
    data = json.dumps(teams_data(), sort_keys=True, separators=(",", ":")).encode()
    return "teams:" + hashlib.sha256(data).hexdigest()[:16]


def resolve_capacity(relative: str, levels: Sequence[str]) -> str:
    """`strongest` -> the last level, `second` -> the one below it (or the only one)."""
    if relative == "strongest":
        return levels[-1]
    if relative == "second":
        return levels[-2] if len(levels) > 1 else levels[-1]
    raise ValueError(f"teams.yaml: unknown relative capacity {relative!r} (use strongest or second)")


def team_of(task: str) -> Team:
    """The team of `prompts/teams.yaml` for `task`: its kind's, but a code task whose examples cannot be run
    (it shows none that `runtime.examples_gate` reads, or this machine has no sandbox) gets `code_unchecked`,
    one programmer: five programmers only pay when the task can check their programs (teams.yaml says why)."""
    kind = task_kind(task)
    if kind != "code" or task_examples(task) is None:
        return "code_unchecked" if kind == "code" else kind
    if why := sandbox_missing():
        log.warning("this task's examples cannot be run here (%s); one programmer answers it unchecked", why)
        return "code_unchecked"
    return "code"


def team_spec(team: Team, roles: RoleLibrary, levels: Sequence[str]) -> Spec:
    """The validated team named `team` (an answer kind, or `code_unchecked`) on a pool with `levels` (weakest
    first)."""
    data = teams_data()[team]
    agents = tuple(Agent(name=a["name"], role=a["role"], duty=a.get("duty", ""),
                         capacity=resolve_capacity(a["capacity"], levels),
                         depends_on=tuple(a.get("depends_on", ())), stop=a.get("stop"))
                   for a in data["agents"])
    return validate_spec(Spec(agents=agents, output=data["output"]), roles, levels)


class TemplateOrchestrator:
    """Implements `Orchestrator` with the teams of `prompts/teams.yaml` (no model call)."""

    level = None  # writes no spec with a model: nothing to load before proposing

    def __init__(self, roles: RoleLibrary, levels: Sequence[str]) -> None:
        self.roles = roles
        self.levels = tuple(levels)

    def token_bound(self, task: str) -> int:
        """No model call: a proposal costs no token."""
        return 0

    async def propose(self, task: str, *, seed: int = 0) -> Proposal:
        team = team_of(task)
        spec = team_spec(team, self.roles, self.levels)
        return Proposal(spec=spec, source="template", raw=render_spec(spec).text,
                        extra={"kind": task_kind(task), "team": team, "orchestrator": "template"})

    async def aclose(self) -> None:
        return None
