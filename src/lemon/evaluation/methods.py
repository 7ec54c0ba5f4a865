"""Evaluation methods as typed objects: the one place that knows what a `--method` value means.

A method writes the spec of each (item, seed) and knows its own identity. Baselines (`baselines/`) return
their fixed spec; `template`, `prompted` and `trained:PATH` wrap their orchestrator (the `Orchestrator`
protocol of `lemon.orchestrator.base`). The evaluation harness only sees `Method` and `SpecWriter`, so it never
compares method names; `resolve_method` is the only parser of a `--method` value.

Adding a method = one class with `name`, `identity()` and `bind()` (in its own module if it is large) plus
one entry in `_ORCHESTRATORS` below; a fixed baseline is one `BaselineKind` of the baselines' registry
(`baselines/__init__.py`) instead. The CLI help and the error message for an unknown method follow from both.

A `Method` is a small frozen dataclass so it pickles into Ray workers; `bind` builds the live part (models,
connections) once per process, from a `MethodEnv`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from lemon.errors import LemonError
from lemon.evaluation.baselines import baseline_spec, find_baseline
from lemon.evaluation.baselines import method_names as baseline_names
from lemon.paths import lemon_home

if TYPE_CHECKING:  # the rest is imported where it is used
    from lemon.llm.pool import Pool
    from lemon.orchestrator.base import Orchestrator, Proposal
    from lemon.runtime.budget import TokenLedger
    from lemon.spec.model import Spec
    from lemon.spec.roles import RoleLibrary

# What a run of a method that picks each agent's level shows as its level (it is stored under a nominal one).
CHOSEN_LEVEL = "chosen by the method"


def uses_level(method: str) -> bool:
    """Only a fixed baseline puts every agent at one `--level`; `template`, `prompted` and `trained:PATH`
    choose each agent's level, so the level their runs are stored under (for stable run ids) means nothing."""
    return find_baseline(method) is not None


def shown_level(method: str, level: str) -> str:
    """A stored run's level as `lemon runs`, `lemon report` and the viewer show it (issue 25: the template's
    runs read `medium`, though it picks levels itself)."""
    return level if uses_level(method) else CHOSEN_LEVEL


def shown_method(method: str) -> str:
    """A method as tables show it: a trained policy under LEMON_HOME reads `trained:$LEMON_HOME/REL`, so a
    report names the policy, not this machine's home folder (and stays one column wide); others as stored.
    Distinct policies keep distinct names: the mapping is one-to-one for one LEMON_HOME."""
    prefix = next((p for p in ("trained:", "unconstrained:") if method.startswith(p)), None)
    if prefix is None:
        return method
    try:
        relative = Path(method.removeprefix(prefix)).relative_to(lemon_home())
    except ValueError:
        return method
    return f"{prefix}$LEMON_HOME/{relative.as_posix()}"


def run_label(method: str, level: str) -> str:
    """`method@level` for a baseline, the method alone for one that picks levels (short, for tables)."""
    return f"{method}@{level}" if uses_level(method) else shown_method(method)


@dataclass(frozen=True)
class MethodEnv:
    """What a method builds its spec writer from, once per process."""

    pool: Pool
    roles: RoleLibrary
    kind: str  # the benchmark's answer kind: number, choice or code
    level: str  # the capacity of every baseline agent
    n_agents: int | None = None  # agents of the sized baselines (None: their default)


@dataclass(frozen=True)
class Written:
    """The spec of one (item, seed), with the orchestrator's proposal when one wrote it."""

    spec: Spec
    proposal: Proposal | None = None


class SpecWriter(Protocol):
    """A method bound to one process's pool: writes the spec of each item."""

    async def write(self, task: str, *, seed: int, ledger: TokenLedger | None = None) -> Written:
        """The spec for `task`; an orchestrator's worst case is reserved on `ledger` first (if any)."""
        ...


class Method(Protocol):
    """One `--method` value: its name (as stored in runs), its identity, and how it writes specs."""

    @property
    def name(self) -> str: ...

    def identity(self) -> str | None:
        """What else identifies the method's results beyond its name (None: the name is enough)."""
        ...

    def bind(self, env: MethodEnv) -> SpecWriter: ...


# ---- baselines: a fixed spec --------------------------------------------------------------------------


@dataclass(frozen=True)
class _FixedSpecs:
    name: str
    env: MethodEnv

    def spec(self, seed: int) -> Spec:
        from lemon.spec.validate import validate_spec

        e = self.env
        spec = baseline_spec(self.name, e.kind, level=e.level, seed=seed, n=e.n_agents)
        return validate_spec(spec, e.roles, e.pool.level_names)

    async def write(self, task: str, *, seed: int, ledger: TokenLedger | None = None) -> Written:
        return Written(self.spec(seed))


@dataclass(frozen=True)
class Baseline:
    """A fixed topology of the baselines' registry (`baselines/`); only `random` uses the seed (its graph is drawn
    per item and seed)."""

    name: str

    def identity(self) -> str | None:
        return None

    def bind(self, env: MethodEnv) -> SpecWriter:
        writer = _FixedSpecs(self.name, env)
        writer.spec(0)  # a bad --agents or --level fails here, before any item runs
        return writer


# ---- orchestrators: a proposal per item ---------------------------------------------------------------


@dataclass(frozen=True)
class _Orchestrated:
    orchestrator: Orchestrator

    async def write(self, task: str, *, seed: int, ledger: TokenLedger | None = None) -> Written:
        if ledger is None:
            proposal = await self.orchestrator.propose(task, seed=seed)
            return Written(proposal.spec, proposal)
        bound = self.orchestrator.token_bound(task)  # the most tokens one proposal can cost
        held = await ledger.reserve(bound, bound, what="the orchestrator")
        spent = held  # failed or cut off: it may have been billed
        try:
            proposal = await self.orchestrator.propose(task, seed=seed)
            spent = proposal.tokens
            return Written(proposal.spec, proposal)
        finally:
            ledger.settle(held, spent)


def _orchestrated(name: str, env: MethodEnv) -> _Orchestrated:
    """The orchestrator called `name` (`orchestrator.resolve`, the one resolver `lemon run` uses too)."""
    from lemon.orchestrator.resolve import resolve_orchestrator

    return _Orchestrated(resolve_orchestrator(name, env.pool, env.roles))


@dataclass(frozen=True)
class Template:
    """The default orchestration: a team per answer kind from a data file (no model call)."""

    name: str = "template"

    def identity(self) -> str | None:
        """The teams themselves (not the comments of their data file): a run written by one team is never
        resumed by another (the number team became a stop-rule vote on 2026-11-24; the run id did not move)."""
        from lemon.orchestrator.template import teams_identity

        return teams_identity()

    def bind(self, env: MethodEnv) -> SpecWriter:
        return _orchestrated(self.name, env)


@dataclass(frozen=True)
class Prompted:
    """A pool model writes the spec under a JSON schema (the untrained orchestrator)."""

    name: str = "prompted"

    def identity(self) -> str | None:
        """The fallback's teams: unusable output runs the default orchestration's team (`fallback_identity`)."""
        from lemon.orchestrator.repair import fallback_identity

        return fallback_identity()

    def bind(self, env: MethodEnv) -> SpecWriter:
        return _orchestrated(self.name, env)


@dataclass(frozen=True)
class Trained:
    """A trained policy (model directory, run directory or .gguf) writes the spec, under the spec grammar
    (`unconstrained:PATH`: decoding freely, as policies did before the grammar; its own method, so its runs and
    their share of unusable specs stay apart)."""

    path: str
    grammar: bool = True

    @property
    def name(self) -> str:
        return f"{'trained' if self.grammar else 'unconstrained'}:{self.path}"

    def identity(self) -> str | None:
        """The policy's content identity (`policy_identity`: weights, config, tokenizer, prompt style; a card's
        recorded one: a card names the policy it replays), the fallback (`fallback_identity`)
        and, decoding under the spec grammar, the grammar (`grammar_identity`: runs decoded freely, or under
        another grammar, are never resumed into).

        The path alone does not identify a policy (lemon train rewrites `final/` in place), so, as with pool
        files, a different model at the same path starts a new run instead of resuming into another model's
        results.
        """
        from lemon.orchestrator.policy_card import is_card, policy_identity, read_card
        from lemon.orchestrator.repair import fallback_identity
        from lemon.orchestrator.trained import resolve_policy_path
        from lemon.spec.grammar import grammar_identity

        model_id = read_card(Path(self.path).expanduser()).model_id if is_card(self.path) else \
            policy_identity(resolve_policy_path(self.path))
        decoding = f";{grammar_identity()}" if self.grammar else ""
        return f"{model_id};{fallback_identity()}{decoding}"

    def bind(self, env: MethodEnv) -> SpecWriter:
        return _orchestrated(self.name, env)  # says if the path is missing


def loads_torch(method: Method) -> bool:
    """Whether evaluating `method` loads torch into the process: a trained policy in a model directory (a
    `.gguf` one runs in llama.cpp). On a GPU torch beside a CUDA llama.cpp crashes the process, so `lemon eval`
    serves the workers out of process then."""
    return isinstance(method, Trained) and not method.path.endswith((".gguf", ".json"))  # a card loads no model


# ---- the table ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    make: Callable[[str], Method]  # from the text after `name:` ("" for a plain name)
    shown: str  # how the help and error messages write it
    note: str = ""
    takes_arg: bool = False


_ORCHESTRATORS: dict[str, _Entry] = {
    "template": _Entry(lambda _: Template(), "template", "the default orchestration"),
    "prompted": _Entry(lambda _: Prompted(), "prompted"),
    "trained": _Entry(Trained, "trained:PATH", takes_arg=True),
    "unconstrained": _Entry(lambda path: Trained(path, grammar=False), "unconstrained:PATH",
                            "a trained policy decoding without the spec grammar", takes_arg=True),
}


def _methods() -> dict[str, _Entry]:
    """The table: every registered baseline (`baselines.method_names()`, read now, so a baseline registered
    later is a method too), then the orchestrators."""
    return {**{n: _Entry(Baseline, n) for n in baseline_names()}, **_ORCHESTRATORS}


def method_names() -> tuple[str, ...]:
    """Valid `--method` values, as shown in help and error messages."""
    return tuple(e.shown for e in _methods().values())


def method_help() -> str:
    """The `--method` help line, e.g. 'vanilla, cot, ..., template (the default orchestration), ...'."""
    shown = [f"{e.shown} ({e.note})" if e.note else e.shown for e in _methods().values()]
    return ", ".join(shown[:-1]) + f", or {shown[-1]}."


def resolve_method(value: str) -> Method:
    """The method a `--method` value names, or a one-line LemonError listing the valid ones."""
    head, sep, arg = value.partition(":")
    entry = _methods().get(head)
    if entry is not None and entry.takes_arg == bool(sep) and (arg or not entry.takes_arg):
        return entry.make(arg if entry.takes_arg else head)
    raise LemonError(f"unknown method {value!r}; valid: {', '.join(method_names())}")
