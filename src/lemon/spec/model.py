"""The executable specification: agents with a role, a duty, a capacity level and dependencies.

The bounds live in the schema on purpose: they stop constrained decoding from looping on a tiny model
and make hostile input (huge specs, giant strings) cheap to reject before any work is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from lemon.spec.bounds import (  # noqa: F401  (re-exported: the bounds are read from the model too)
    MAX_AGENTS,
    MAX_DUTY_LEN,
    MAX_LOGPROB,
    MAX_NAME_LEN,
    MAX_SPEC_CHARS,
    MIN_LOGPROB,
)
from lemon.spec.stops import StopCriterion, StopView, criteria, find_criterion

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


class StopRule(BaseModel):
    """When an aggregating agent may stop asking its parents (adaptive self-consistency).

    The parents run lazily, in written order: first as many as the rule needs to decide (`first_wave`), then
    `wave` more at a time, until the rule fires or `max` have run (default: all). What decides is the rule's
    criteria, each a key of the written rule owned by one object of `lemon.spec.stops` (its validation, text,
    edits and runtime decision): at most one criterion (`agree: k` fires once k parents gave the same answer;
    `confidence: c` once the leading answer is the majority with posterior probability >= c; `posterior: c` once
    the vote's answer has a confidence-weighted posterior >= c, each reply weighed by its log-probability) and at
    most one gate, checked first after each wave, which takes one parent alone (`logprob: t`: the first reply
    the model was sure of; `examples: true`: the first program that passes the task's own examples). Parents never run
    cost nothing: that is the point of the rule. `rule.agree` and the like read a criterion's value (None when
    the rule has none).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    max: int | None = Field(default=None, ge=1, le=MAX_AGENTS - 1,
                            description="run at most this many parents (default: all)")
    wave: int = Field(default=1, ge=1, le=MAX_AGENTS - 1, description="parents started together after the first")

    @model_validator(mode="wrap")
    @classmethod
    def _criteria(cls, data: Any, handler: ModelWrapValidatorHandler[StopRule]) -> StopRule:
        """Each criterion's value validated by its own type (an error names `stop.<key>`), unset ones (None)
        left out, and a key that is neither a modifier nor a registered criterion refused as unknown."""
        if isinstance(data, dict):
            data = {**{k: v for k, v in data.items() if k in cls.model_fields},
                    **_criterion_values({k: v for k, v in data.items() if k not in cls.model_fields})}
        return handler(data)

    @model_validator(mode="after")
    def _one_of_each(self) -> StopRule:
        chosen = self.values
        for kind, what in (("criterion", "give exactly one of {}, not both"), ("gate", "give one gate: {}, not both")):
            if sum(1 for k in chosen if _kind(k) == kind) > 1:
                raise ValueError(what.format(" or ".join(c.phrase for c in criteria() if c.kind == kind)))
        if (control := self.controller) is not None and len(chosen) > 1:
            others = ", ".join(k for k in chosen if k != control[0].key)
            raise ValueError(f"{control[0].key} decides alone: drop {others}")
        if not chosen:
            hints = {kind: " or ".join(c.hint for c in criteria() if c.kind == kind) for kind in ("criterion", "gate")}
            raise ValueError(f"give exactly one of {hints['criterion']}, or a gate: {hints['gate']}")
        for key, value in chosen.items():
            if problem := _criterion(key).problem(value, self.max):
                raise ValueError(problem)
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """The keys the first rules had (agree, confidence, max, wave) always, in that order, then each other
        criterion that is set: traces' topology, and the run ids hashed from it, stay as they were."""
        data: dict[str, object] = handler(self)
        out = {c.key: data.get(c.key) for c in criteria() if c.always_dumped}
        out |= {"max": data["max"], "wave": data["wave"]}
        return out | {c.key: data[c.key] for c in criteria() if not c.always_dumped and c.key in data}

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)  # type: ignore[misc]
        except AttributeError:
            if find_criterion(name) is not None:
                return None  # a registered criterion this rule does not use
            raise

    @property
    def values(self) -> dict[str, Any]:
        """The criteria this rule sets, key -> value, in registry order."""
        extra = self.__pydantic_extra__ or {}
        return {c.key: extra[c.key] for c in criteria() if c.key in extra}

    def _of_kind(self, kind: str) -> tuple[StopCriterion, Any] | None:
        return next(((_criterion(k), v) for k, v in self.values.items() if _kind(k) == kind), None)

    @property
    def criterion(self) -> tuple[StopCriterion, Any] | None:
        """The rule's criterion and its value (None: a gate alone)."""
        return self._of_kind("criterion")

    @property
    def gate(self) -> tuple[StopCriterion, Any] | None:
        """The rule's gate and its value (None: no gate)."""
        return self._of_kind("gate")

    @property
    def controller(self) -> tuple[StopCriterion, Any] | None:
        """The rule's controller and its value (None: none; then its criterion and gate decide)."""
        return self._of_kind("controller")

    @property
    def gated(self) -> bool:
        """Whether a gate may take one parent alone (then the first wave is one parent)."""
        return self.gate is not None

    @property
    def first_wave(self) -> int:
        """Parents started before the rule is first checked: fewer could never fire it (a gate: one parent,
        which may be taken alone)."""
        return 1 if self.gated or self.controller is not None else self.least_parents

    @property
    def required_agreement(self) -> int | None:
        """Parents the criterion itself needs (`agree`'s k), None when it sets no such bound."""
        found = self.criterion
        return found[0].least_parents(found[1]) if found is not None else None

    @property
    def least_parents(self) -> int:
        """Parents the rule needs to decide anything: its criterion's own bound (`agree` of them), else 2 (a
        confidence bound, or a gate that only chooses between taking one parent alone and a vote of several)."""
        found = self.required_agreement
        return found if found is not None else 2

    def fires(self, keys: list[str | None]) -> bool:
        """Whether the rule's criterion is satisfied by the vote keys of the parents run so far (a gate alone
        has none: only a sure parent fires it)."""
        found = self.criterion
        return found is not None and found[0].fires(found[1], keys)

    async def decides(self, view: StopView, parents: Sequence[str]) -> bool:
        """Whether the rule's criterion is satisfied by the parents run so far, asked through a run's view (what
        the runtime asks: a criterion may read more than the answers, e.g. `posterior` their replies' scores)."""
        found = self.criterion
        return found is not None and await found[0].decides(found[1], view, parents)


def _criterion(key: str) -> StopCriterion:
    found = find_criterion(key)
    assert found is not None, key
    return found


def _kind(key: str) -> str:
    return _criterion(key).kind


def _criterion_values(data: dict[str, Any]) -> dict[str, Any]:
    """Each registered criterion's value validated by its type; unset (None) ones left out; a
    `ValidationError` whose location names the key for a bad value or an unknown key."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        found = find_criterion(key) if isinstance(key, str) else None
        if found is None:
            raise ValidationError.from_exception_data("StopRule", [
                InitErrorDetails(type="extra_forbidden", loc=(str(key),), input=value)])
        if value is None:
            continue
        try:
            checked = found.adapter.validate_python(value)
        except ValidationError as exc:
            raise ValidationError.from_exception_data("StopRule", [
                InitErrorDetails(type=PydanticCustomError("value_error", e["msg"])
                                 if e["type"] == "value_error" else e["type"],
                                 loc=(key, *e["loc"]), input=e["input"], ctx=e.get("ctx", {}))
                for e in exc.errors()]) from None
        if checked is not None:
            out[key] = checked
    return out


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
