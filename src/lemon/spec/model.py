"""The executable specification: agents with a role, a duty, a capacity level and dependencies.

The bounds live in the schema on purpose: they stop constrained decoding from looping on a tiny model
and make hostile input (huge specs, giant strings) cheap to reject before any work is done.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

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
# A stop rule's `logprob` gate: nats summed over a reply's tokens, a whole number so that an edit steps it and
# its text is short; -1 is a reply the model was all but certain of, -1000 about 400 uncertain tokens.
MIN_LOGPROB = -1000
MAX_LOGPROB = -1
_WHOLE = re.compile(r"[-+]?[0-9]{1,9}")  # short: a 5,000-digit string never reaches int()
# Plain YAML scalars that would load as booleans or null instead of the name.
RESERVED_NAMES = frozenset({"yes", "no", "on", "off", "true", "false", "null"})


def _not_reserved(value: str) -> str:
    if value in RESERVED_NAMES:
        raise ValueError(f"{value!r} is a YAML keyword; pick another name")
    return value


def _shown(value: object) -> str:
    """A hostile value in one short line of an error message."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 40 else text[:37] + "..."


Name = Annotated[str, Field(pattern=NAME_PATTERN), AfterValidator(_not_reserved)]


class StopRule(BaseModel):
    """When an aggregating agent may stop asking its parents (adaptive self-consistency).

    The parents run lazily, in written order: first `agree` of them (or 2 for `confidence`; 1 when a `logprob`
    gate is set), then `wave` more at a time, until the rule fires or `max` have run (default: all).
    `agree: k` fires once k parents gave the same answer (Early-Stopping Self-Consistency's window rule);
    `confidence: c` fires once the leading answer is the majority with posterior probability >= c under a
    uniform Beta prior (Adaptive-Consistency's Beta criterion). `logprob: t` is a gate checked first after
    each wave: the first parent whose reply has a log-probability >= t nats under its own model (summed over
    the reply's tokens) is sure, fires the rule and is taken alone. It may stand alone (then the majority of
    the parents run, if none was sure) or beside one of `agree` / `confidence`. Parents never run cost
    nothing: that is the point of the rule.
    `examples: true` is the other gate, for code: the first parent whose program passes the examples the task
    itself shows (a docstring's `>>> f(x)` and its value; `lemon.runtime.examples_gate`) is taken alone.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    agree: int | None = Field(default=None, ge=2, le=MAX_AGENTS - 1,
                              description="stop once this many parents gave the same answer")
    confidence: float | None = Field(default=None, ge=0.5, le=0.99,
                                     description="stop once P(leading answer is the majority) >= this")
    max: int | None = Field(default=None, ge=1, le=MAX_AGENTS - 1,
                            description="run at most this many parents (default: all)")
    wave: int = Field(default=1, ge=1, le=MAX_AGENTS - 1, description="parents started together after the first")
    logprob: int | None = Field(default=None, ge=MIN_LOGPROB, le=MAX_LOGPROB,
                                description="take the first parent whose reply has log-probability >= this alone")
    examples: bool | None = Field(default=None, description="take the first parent whose program passes the task's "
                                                            "own examples alone")

    @field_validator("logprob", mode="before")
    @classmethod
    def _whole_nats(cls, value: object) -> object:
        """A whole number of nats in the bounds (spec text reads every scalar as a string: digits with a sign
        are that number), and nothing else YAML or JSON could turn into one (a boolean, a fraction, infinity):
        one message that says what to write instead."""
        if value is None:
            return value
        number = int(value) if isinstance(value, str) and _WHOLE.fullmatch(value) else value
        whole = isinstance(number, int) and not isinstance(number, bool)
        if not whole or not MIN_LOGPROB <= number <= MAX_LOGPROB:  # type: ignore[operator]
            raise ValueError(f"logprob must be a whole number of nats from {MIN_LOGPROB} to {MAX_LOGPROB} "
                             f"(a log-probability is negative; e.g. -25), got {_shown(value)}")
        return number

    @field_validator("examples", mode="after")
    @classmethod
    def _examples_or_none(cls, value: bool | None) -> bool | None:
        """`examples: false` is the rule without the gate: one value for it, so text and model round-trip."""
        return True if value else None

    @model_validator(mode="after")
    def _one_criterion(self) -> StopRule:
        if self.agree is not None and self.confidence is not None:
            raise ValueError("give exactly one of agree (a count) or confidence (a probability), not both")
        if self.logprob is not None and self.examples:
            raise ValueError("give one gate: logprob (a sure reply) or examples (a passing program), not both")
        if self.agree is None and self.confidence is None and self.logprob is None and not self.examples:
            raise ValueError("give exactly one of agree (a count) or confidence (a probability), "
                             "or a gate: logprob (e.g. -25) or examples: true")
        if self.confidence is not None and round(self.confidence, 2) != self.confidence:
            raise ValueError("confidence has at most two decimals, e.g. 0.95")
        if self.agree is not None and self.max is not None and self.agree > self.max:
            raise ValueError(f"agree ({self.agree}) cannot exceed max ({self.max})")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Without a gate, the dump of the fields that existed before the gates (traces' topology, and the run
        ids hashed from it, stay as they were)."""
        data: dict[str, object] = handler(self)
        if self.logprob is None:
            data.pop("logprob", None)
        if not self.examples:
            data.pop("examples", None)
        return data

    @property
    def gated(self) -> bool:
        """Whether a gate may take one parent alone (then the first wave is one parent)."""
        return self.logprob is not None or bool(self.examples)

    @property
    def first_wave(self) -> int:
        """Parents started before the rule is first checked: fewer could never fire it (a gate: one parent,
        which may be taken alone)."""
        return 1 if self.gated else self.least_parents

    @property
    def least_parents(self) -> int:
        """Parents the rule needs to decide anything: `agree` of them, else 2 (a confidence bound, or a gate
        that only chooses between taking one parent alone and a vote of several)."""
        return self.agree if self.agree is not None else 2


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
    stop: StopRule | None = Field(default=None, description="an aggregator's rule to stop running its parents")


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
