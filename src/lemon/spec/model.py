"""The executable specification: agents with a role, a duty, a capacity level and dependencies.

The bounds live in the schema on purpose: they stop constrained decoding from looping on a tiny model
and make hostile input (huge specs, giant strings) cheap to reject before any work is done.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

# Bounds. Changing one changes the JSON schema given to orchestrators; keep them in one place.
MAX_AGENTS = 12
MAX_NAME_LEN = 24
MAX_DUTY_LEN = 300
MAX_SPEC_CHARS = 32_000
NAME_PATTERN = rf"^[a-z][a-z0-9_]{{0,{MAX_NAME_LEN - 1}}}$"
# A duty is one line of instruction, rendered verbatim inside double quotes; so no quote, backslash, control
# or line-breaking characters, nothing YAML refuses to read (this is what makes every field's span in the
# canonical text exact, and `parse(render(s)) == s` hold).
DUTY_PATTERN = r'^[^"\\\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]*$'
# Plain YAML scalars that would load as booleans or null instead of the name.
RESERVED_NAMES = frozenset({"yes", "no", "on", "off", "true", "false", "null"})


def _not_reserved(value: str) -> str:
    if value in RESERVED_NAMES:
        raise ValueError(f"{value!r} is a YAML keyword; pick another name")
    return value


Name = Annotated[str, Field(pattern=NAME_PATTERN), AfterValidator(_not_reserved)]


class Agent(BaseModel):
    """One node of the DAG."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name = Field(description="unique identifier, lower_snake_case")
    role: Name = Field(description="base role from the role library")
    duty: str = Field(default="", max_length=MAX_DUTY_LEN, pattern=DUTY_PATTERN,
                      description="task-specific instruction; empty means the base role as is")
    capacity: Name = Field(description="capacity level of the pool")
    depends_on: tuple[Name, ...] = Field(default=(), max_length=MAX_AGENTS - 1,
                                        description="names of agents whose outputs this agent reads")


class Spec(BaseModel):
    """A whole orchestration: the agents and the one whose output is the answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agents: tuple[Agent, ...] = Field(min_length=1, max_length=MAX_AGENTS)
    output: Name | None = Field(default=None, description="final agent; defaults to the unique sink")

    def agent(self, name: str) -> Agent:
        """The agent called `name` (KeyError if absent)."""
        for a in self.agents:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.agents)

    def sinks(self) -> tuple[str, ...]:
        """Agents no other agent depends on, in spec order."""
        used = {p for a in self.agents for p in a.depends_on}
        return tuple(a.name for a in self.agents if a.name not in used)

    def final_agent(self) -> str:
        """`output` if given, else the unique sink (validation guarantees one exists)."""
        if self.output is not None:
            return self.output
        sinks = self.sinks()
        if len(sinks) != 1:
            raise ValueError(f"spec has {len(sinks)} sinks and no output")
        return sinks[0]

    def children(self, name: str) -> tuple[str, ...]:
        return tuple(a.name for a in self.agents if name in a.depends_on)

    def descendants(self, name: str) -> frozenset[str]:
        """Every agent that (transitively) depends on `name`, excluding `name`."""
        out: set[str] = set()
        frontier = [name]
        while frontier:
            cur = frontier.pop()
            for child in self.children(cur):
                if child not in out:
                    out.add(child)
                    frontier.append(child)
        return frozenset(out)
