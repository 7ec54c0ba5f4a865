"""The role library: base roles as data files (`lemon/spec/roles/*.yaml`), not code.

A role has a system prompt and a `kind`: `llm` agents call a model; `program` agents call a model for a Python
program, which the runtime runs in the sandbox for their answer (`lemon.runtime.programs`); `vote` agents are
deterministic aggregators (majority vote over their parents' extracted answers) and make no model call.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lemon.errors import ConfigError
from lemon.spec.forward import Forward
from lemon.yamlfile import load_yaml


@dataclass(frozen=True, slots=True)
class RoleKind:
    """What an agent of a role does, registered once: whether it calls a model, whether it votes over its
    parents (no model call; it may carry a stop rule), whether its reply is a program the runtime runs, and
    whether the prose prompts list it (`llm_role_names`). Every caller asks these, never the kind's name."""

    name: str
    calls_model: bool = True
    votes: bool = False
    runs_program: bool = False
    prose: bool = False


#: The role kinds, by name; a new kind is one entry here (and a role file naming it).
ROLE_KINDS: dict[str, RoleKind] = {k.name: k for k in (
    RoleKind("llm", prose=True),
    RoleKind("program", runs_program=True),
    RoleKind("vote", calls_model=False, votes=True),
)}


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    description: str
    system_prompt: str
    kind: str = "llm"  # a name of ROLE_KINDS

    @property
    def behaviour(self) -> RoleKind:
        """The role's kind as an object (`RoleKind`)."""
        return ROLE_KINDS[self.kind]

    votes = Forward[bool]("behaviour.votes")
    calls_model = Forward[bool]("behaviour.calls_model")
    runs_program = Forward[bool]("behaviour.runs_program")


class RoleLibrary:
    """Immutable mapping name -> Role, loaded from a folder of YAML files."""

    def __init__(self, roles: dict[str, Role]) -> None:
        self._roles = dict(roles)

    @classmethod
    def load(cls, folder: Path | None = None) -> RoleLibrary:
        """Load every `*.yaml` in `folder` (default: the packaged library)."""
        if folder is None:
            base = resources.files("lemon.spec") / "roles"
            files = [(p.name, p.read_text(encoding="utf-8")) for p in base.iterdir() if p.name.endswith(".yaml")]
        else:
            files = [(p.name, p.read_text(encoding="utf-8")) for p in sorted(Path(folder).glob("*.yaml"))]
        roles: dict[str, Role] = {}
        for fname, text in sorted(files):
            data = load_yaml(text)
            if not isinstance(data, dict) or not {"name", "system_prompt"} <= data.keys():
                raise ConfigError(f"role file {fname}: expected a mapping with 'name' and 'system_prompt'")
            kind = data.get("kind", "llm")
            if kind not in ROLE_KINDS:
                raise ConfigError(f"role file {fname}: kind must be one of {', '.join(ROLE_KINDS)}, got {kind!r}")
            roles[data["name"]] = Role(
                name=data["name"],
                description=str(data.get("description", "")).strip(),
                system_prompt=str(data["system_prompt"]).strip(),
                kind=kind,
            )
        return cls(roles)

    def __contains__(self, name: object) -> bool:
        # Not a dict lookup alone: a decoded spec may hold a list or mapping where a role name belongs.
        return isinstance(name, str) and name in self._roles

    def __getitem__(self, name: str) -> Role:
        return self._roles[name]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._roles))

    def llm_role_names(self) -> tuple[str, ...]:
        """The prose roles: those a prompted orchestrator and the full policy prompt list. Program roles are
        left out so those prompts (and their cached requests) stay as they were measured; a spec may still
        name one, and the bank teams and `pot` baselines do."""
        return tuple(n for n in self.names if self._roles[n].behaviour.prose)
