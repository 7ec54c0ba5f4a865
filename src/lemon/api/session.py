"""Run a task, or execute a spec on one: the use case of `lemon run` and `lemon exec`, for the CLI and scripts.

Why here and not in the CLI: a 15-line script built from the layers' contracts ran a different algorithm from
`lemon run` (greedy voters, the pool file's 128-token replies, a vote comparing whole reply texts so that
`stop: {agree: 2}` never fired), and nothing warned. The one correct recipe lived in the CLI. It lives here now,
with LEMON's defaults (`lemon.llm.defaults`), and `lemon run` / `lemon exec` only parse options, call it and
render the `Result`: a script and a command cannot disagree.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Coroutine
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TypeVar

from lemon.api.spec import PoolRef, Spec
from lemon.errors import LemonError, StorageError
from lemon.files import disk_full
from lemon.llm.defaults import DEFAULT_MAX_TOKENS, DEFAULT_POOL, DEFAULT_TEMPERATURE
from lemon.llm.pool import Pool
from lemon.llm.pools import load_pool as _load_pool
from lemon.orchestrator.base import Orchestrator, Proposal
from lemon.orchestrator.kinds import extracted_answer, reply_extractor, task_kind
from lemon.orchestrator.resolve import resolve_orchestrator
from lemon.paths import ensure_dir, runs_dir
from lemon.runtime.budget import Budget, check_positive_int, check_timeout, prompt_token_bound
from lemon.runtime.executor import Executor, RunResult, VoteKey
from lemon.runtime.trace import AgentTokens, Trace, TraceEvent
from lemon.spec.model import Spec as PlainSpec  # what the runtime and an orchestrator hand on (lemon.Spec's base)
from lemon.spec.roles import RoleLibrary

T = TypeVar("T")
#: What a run is doing while an observer may show it: loading the orchestrator's model, writing the spec,
#: loading the workers' models.
Stage = Literal["orchestrator_model", "orchestrator", "models"]


class RunObserver:
    """What a run tells while it runs; the default tells nothing. The CLI's subclass draws a status line per
    stage and a live table of the agents (`lemon.cli.session`); a script may subclass it the same way."""

    def stage(self, stage: Stage) -> AbstractContextManager[object]:
        """A context around one stage of the run (a spinner, a log line)."""
        return nullcontext()

    def running(self, spec: Spec) -> AbstractContextManager[object]:
        """A context around the agents' run, entered once the spec is known and its models are loaded."""
        return nullcontext()

    def event(self, event: TraceEvent) -> None:
        """Each trace event as the runtime records it (spawn, return, stop...)."""


@dataclass(frozen=True)
class RunSettings:
    """How a run calls its workers. The defaults are LEMON's (`lemon.llm.defaults`), not the pool file's."""

    seed: int = 0
    temperature: float = DEFAULT_TEMPERATURE
    max_tokens: int = DEFAULT_MAX_TOKENS  # each worker reply's limit
    budget_tokens: int | None = None  # the run's tokens, orchestrator and workers (None: no cap)
    timeout: float | None = None  # seconds per model call
    cache: bool = True  # the persistent LLM cache (LEMON_HOME/llm-cache.sqlite)

    def __post_init__(self) -> None:
        check_positive_int("max_tokens", self.max_tokens)
        check_positive_int("budget_tokens", self.budget_tokens)
        check_timeout("timeout", self.timeout)
        if not 0.0 <= self.temperature <= 2.0:
            raise LemonError(f"temperature must be in [0, 2], got {self.temperature}")


class TraceNotSaved(StorageError):
    """The run finished but its trace could not be written (an unwritable folder, a full disk)."""

    def __init__(self, path: Path, reason: str, full: bool) -> None:
        fix = ("the disk is full: free space there or save to a folder on another disk (trace_dir)" if full
               else "pass trace_dir a writable folder or fix LEMON_HOME")
        super().__init__(f"the run finished but its trace could not be saved to {path}: {reason}; {fix}")
        self.path, self.reason, self.disk_full = path, reason, full


@dataclass(frozen=True)
class Result:
    """One run of a task: the answer first, then what it cost and how it went.

    `answer` is the answer extracted from the output agent's reply for the task's kind (a number, a letter,
    code; None when the run stopped or no answer was found), `output` that reply whole. `tokens` is what the
    answer cost: every agent's prompt and completion tokens (cached ones included) plus the orchestrator's.
    `trace` is the orchestration trace (`lemon.runtime.trace.Trace`: events, each agent's messages and reply),
    saved at `trace_path` (`lemon trace`, `lemon view` and `lemon explain` read it by path or id). `run` is
    the runtime's whole `RunResult`; `proposal` how the spec was written (None for `lemon.execute`).
    """

    task: str
    spec: Spec
    answer: str | None
    run: RunResult
    proposal: Proposal | None = None
    trace_path: Path | None = None

    @property
    def ok(self) -> bool:
        """Whether the run finished (`status` "ok"); else it stopped (budget, timeout, a failing model)."""
        return self.run.status == "ok"

    @property
    def status(self) -> str:
        """`ok`, `budget_exceeded`, `timeout` or `error`."""
        return self.run.status

    @property
    def stop_reason(self) -> str:
        """Why the run ended, in words (the final answer, or what stopped it)."""
        return self.run.stop_reason

    @property
    def output(self) -> str | None:
        """The output agent's whole reply (None when the run stopped)."""
        return self.run.answer if self.ok else None

    @property
    def trace(self) -> Trace:
        """The orchestration trace; `print()` it for one line per event."""
        return self.run.trace

    @property
    def worker_tokens(self) -> int:
        """The agents' tokens: what the spec costs (agents served from a cache included)."""
        return self.run.total_tokens

    @property
    def orchestrator_tokens(self) -> int:
        """What writing the spec cost (0 for the template, which calls no model)."""
        return self.proposal.tokens if self.proposal is not None else 0

    @property
    def tokens(self) -> int:
        """Everything the answer cost: the workers' tokens and the orchestrator's."""
        return self.worker_tokens + self.orchestrator_tokens

    @property
    def tokens_by_agent(self) -> dict[str, AgentTokens]:
        """Each agent's prompt and completion tokens, its level and model, and whether a cache served it."""
        return self.run.tokens_by_agent

    @property
    def wall_s(self) -> float:
        """Seconds the agents ran (the spec's run, not the orchestrator's)."""
        return self.run.wall_s

    def save_trace(self, folder: str | Path | None = None) -> Result:
        """This result with its trace saved in `folder` (default LEMON_HOME/runs) as trace-<id>.json;
        `TraceNotSaved` (a `StorageError`) when it cannot be written."""
        where = Path(folder) if folder is not None else runs_dir()
        path = where / f"trace-{self.trace.trace_id}.json"
        try:
            ensure_dir(where, "run traces")
            self.trace.save(path)
        except (OSError, StorageError) as exc:
            reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
            raise TraceNotSaved(path, reason, disk_full(where, exc)) from None
        return replace(self, trace_path=path)

    def to_json(self) -> dict[str, object]:
        """What `lemon run --json` prints: the answer first, then what it cost and where its trace is."""
        r = self.run
        return {"answer": self.answer, "output": self.output, "output_agent": self.spec.output,
                "status": r.status, "stop_reason": r.stop_reason, "spec": self.spec.text,
                "tokens_by_agent": r.tokens_by_agent, "tokens_by_level": r.tokens_by_level,
                "total_tokens": r.total_tokens, "spent_tokens": r.spent_tokens, "calls": r.calls,
                "llm_cache_hits": r.llm_cache_hits, "node_cache_hits": r.cache_hits,
                "unrun_agents": list(r.unrun), "wall_s": round(r.wall_s, 3), "trace_id": r.trace.trace_id,
                "trace": str(self.trace_path) if self.trace_path is not None else None}


def run(task: str, *, pool: PoolRef = DEFAULT_POOL, orchestrator: str = "template", level: str | None = None,
        seed: int = 0, temperature: float = DEFAULT_TEMPERATURE, max_tokens: int = DEFAULT_MAX_TOKENS,
        budget_tokens: int | None = None, timeout: float | None = None, cache: bool = True,
        trace_dir: str | Path | None = None, save_trace: bool = True,
        observer: RunObserver | None = None) -> Result:
    """Answer `task`: an orchestrator writes a spec for it, the runtime runs the spec, the trace is saved.

    What `lemon run "TASK"` does, with its defaults: the `template` orchestrator (the measured team of the
    task's kind; `prompted`, or a trained policy's path), workers sampled at temperature 0.7 with 384-token
    replies on every pool, votes compared by the answer of the task's kind, the LLM cache on. `pool` is a
    built-in pool's name (`cpu`, `tiny`), a pool file, or a `Pool` from `lemon.load_pool` (reused across
    calls; you close it). `budget_tokens` caps the orchestrator's and the workers' tokens together. The trace
    goes to `trace_dir` (default LEMON_HOME/runs) unless `save_trace` is False. A run that stops (budget,
    timeout, a failing model) is returned with `ok` False and its partial trace, not raised. Inside a running
    event loop (a notebook) it runs in a thread of its own; async code may await `arun` instead.
    """
    return sync(arun(task, pool=pool, orchestrator=orchestrator, level=level, seed=seed, temperature=temperature,
                      max_tokens=max_tokens, budget_tokens=budget_tokens, timeout=timeout, cache=cache,
                      trace_dir=trace_dir, save_trace=save_trace, observer=observer))


async def arun(task: str, *, pool: PoolRef = DEFAULT_POOL, orchestrator: str = "template", level: str | None = None,
               seed: int = 0, temperature: float = DEFAULT_TEMPERATURE, max_tokens: int = DEFAULT_MAX_TOKENS,
               budget_tokens: int | None = None, timeout: float | None = None, cache: bool = True,
               trace_dir: str | Path | None = None, save_trace: bool = True,
               observer: RunObserver | None = None) -> Result:
    """`run`, awaited (the same arguments, the same result)."""
    settings = RunSettings(seed, temperature, max_tokens, budget_tokens, timeout, cache)
    result = await _run_task(_task(task), pool, settings, orchestrator=orchestrator, level=level,
                            observer=observer or RunObserver())
    return result.save_trace(trace_dir) if save_trace else result


def execute(spec: Spec | str | Path, task: str, *, pool: PoolRef = DEFAULT_POOL, seed: int = 0,
            temperature: float = DEFAULT_TEMPERATURE, max_tokens: int = DEFAULT_MAX_TOKENS,
            budget_tokens: int | None = None, timeout: float | None = None, cache: bool = True,
            trace_dir: str | Path | None = None, save_trace: bool = True,
            observer: RunObserver | None = None) -> Result:
    """Run `spec` on `task`: what `lemon exec SPEC "TASK"` does, with `run`'s defaults and arguments.

    `spec` is a `lemon.Spec` (or a plain spec model), or a spec file's path; it is checked against the role
    library and the pool's levels before any model loads. Votes compare the answers of the task's kind."""
    return sync(aexecute(spec, task, pool=pool, seed=seed, temperature=temperature, max_tokens=max_tokens,
                          budget_tokens=budget_tokens, timeout=timeout, cache=cache, trace_dir=trace_dir,
                          save_trace=save_trace, observer=observer))


async def aexecute(spec: Spec | str | Path, task: str, *, pool: PoolRef = DEFAULT_POOL, seed: int = 0,
                   temperature: float = DEFAULT_TEMPERATURE, max_tokens: int = DEFAULT_MAX_TOKENS,
                   budget_tokens: int | None = None, timeout: float | None = None, cache: bool = True,
                   trace_dir: str | Path | None = None, save_trace: bool = True,
                   observer: RunObserver | None = None) -> Result:
    """`execute`, awaited (the same arguments, the same result)."""
    settings = RunSettings(seed, temperature, max_tokens, budget_tokens, timeout, cache)
    checked = Spec.read(spec, pool=pool) if isinstance(spec, str | Path) else Spec.of(spec).checked(pool)
    result = await _exec_spec(checked, _task(task), pool, settings, observer=observer or RunObserver())
    return result.save_trace(trace_dir) if save_trace else result


def load_pool(pool: str | Path = DEFAULT_POOL, *, cache: bool = True, offline: bool = False) -> Pool:
    """The capacity levels of `pool` (a built-in pool's name, `cpu` or `tiny`, or a pool file) and the model
    behind each, with the LLM cache in front unless `cache` is False; `offline` answers only from that cache
    (the sample bank). Models load on first use; pass the pool to `run`, `execute` or `Spec.parse` to reuse
    it, and `await pool.aclose()` when done."""
    return _load_pool(str(pool), cache=cache, offline=offline)


async def _run_task(task: str, pool: PoolRef, settings: RunSettings, *, orchestrator: str = "template",
                   level: str | None = None, observer: RunObserver | None = None) -> Result:
    """The spec an orchestrator writes for `task`, run: the one recipe of `lemon run` (trace not saved)."""
    observer = observer or RunObserver()
    roles = RoleLibrary.load()
    async with opened(pool, settings.cache) as the_pool:
        orch = resolve_orchestrator(orchestrator, the_pool, roles, level)
        if orch.level is not None:
            with observer.stage("orchestrator_model"):
                await the_pool.prepare((orch.level,))
        with observer.stage("orchestrator"):
            proposal, settings = await propose_within_budget(orch, task, settings)
        check_budget_covers_a_call(the_pool, roles, proposal.spec, task, settings, int(proposal.tokens))
        kind = proposal.extra.get("kind") or task_kind(task)
        info: dict[str, object] = {
            "source": proposal.source, "tokens": proposal.tokens, "warnings": list(proposal.warnings),
            "raw": proposal.raw, "prompt_tokens": proposal.prompt_tokens,
            "completion_tokens": proposal.completion_tokens}
        run = await _execute(Spec.of(proposal.spec), task, the_pool, roles, settings, observer,
                             reply_extractor(str(kind)), info)
    return _result(task, Spec.of(proposal.spec), run, pool, proposal)


async def _exec_spec(spec: Spec, task: str, pool: PoolRef, settings: RunSettings, *,
                    observer: RunObserver | None = None) -> Result:
    """`spec` (checked) run on `task`: the one recipe of `lemon exec` (trace not saved)."""
    roles = RoleLibrary.load()
    async with opened(pool, settings.cache) as the_pool:
        check_budget_covers_a_call(the_pool, roles, spec, task, settings)
        run = await _execute(spec, task, the_pool, roles, settings, observer or RunObserver(),
                             reply_extractor(task_kind(task)))
    return _result(task, spec, run, pool, None)


def check_budget_covers_a_call(pool: Pool, roles: RoleLibrary, spec: PlainSpec, task: str, settings: RunSettings,
                               spent: int = 0) -> None:
    """A token budget below the worst case of the run's cheapest first call (an agent that reads no other: its
    prompt bound plus the reply limit) is refused before anything runs or loads, saying what that call needs.
    Such a run could only stop at that call (it read as "used up" with nothing used) or cut its reply short.
    `spent`: what the orchestrator took of the budget first (the workers have the rest)."""
    budget = settings.budget_tokens
    first = [a for a in spec.agents if not a.depends_on and not roles[a.role].votes]
    if budget is None or not first:
        return
    executor = Executor(pool, roles)
    prompts = {a.name: prompt_token_bound(executor.messages(a, task, {}, spec)) for a in first}
    agent = min(prompts, key=lambda name: prompts[name])
    worst = prompts[agent] + settings.max_tokens
    if budget < worst:
        given = (f"--budget-tokens {budget + spent} leaves the workers a token budget of {budget} after the "
                 f"orchestrator's {spent}," if spent else f"--budget-tokens {budget} is a token budget")
        raise LemonError(f"{given} below one call's worst case: agent {agent!r} may take {worst} tokens (a "
                         f"prompt of up to {prompts[agent]} and a reply of up to --max-tokens "
                         f"{settings.max_tokens}); raise --budget-tokens to {worst + spent} or lower --max-tokens")


async def propose_within_budget(orch: Orchestrator, task: str,
                                settings: RunSettings) -> tuple[Proposal, RunSettings]:
    """The proposal, with the run's token budget covering the orchestrator too: its worst case (prompt bound
    plus generation limit) must fit before it is asked, and the workers get what it left."""
    budget = settings.budget_tokens
    if budget is None:
        return await orch.propose(task, seed=settings.seed), settings
    bound = orch.token_bound(task)
    if bound > budget:
        raise LemonError(f"the token budget of {budget} (--budget-tokens) cannot cover the orchestrator's worst "
                         f"case of {bound} tokens (its prompt and generation limit); raise it or use the template "
                         "orchestrator")
    proposal = await orch.propose(task, seed=settings.seed)
    left = budget - int(proposal.tokens)
    if left < 1:
        raise LemonError(f"the orchestrator spent {proposal.tokens} of the token budget of {budget} "
                         "(--budget-tokens); nothing is left for the workers: raise it")
    return proposal, replace(settings, budget_tokens=left)


async def _execute(spec: Spec, task: str, pool: Pool, roles: RoleLibrary, settings: RunSettings,
                   observer: RunObserver, vote_key: VoteKey | None,
                   orchestrator: dict[str, object] | None = None) -> RunResult:
    """Load the spec's models, then run it under the observer."""
    params = pool.params(temperature=settings.temperature, max_tokens=settings.max_tokens)
    executor = Executor(pool, roles, budget=Budget(max_tokens=settings.budget_tokens,
                                                   call_timeout_s=settings.timeout),
                        params=params, on_event=observer.event)
    with observer.stage("models"):
        await pool.prepare(tuple({a.capacity for a in spec.agents}))
    with observer.running(spec):
        return await executor.run(spec, task, seed=settings.seed, orchestrator=orchestrator, vote_key=vote_key)


def _result(task: str, spec: Spec, run: RunResult, pool: PoolRef, proposal: Proposal | None) -> Result:
    """The result, its trace naming the pool as given (`lemon explain TRACE` loads it again from there)."""
    ref = (pool.ref or pool.name) if isinstance(pool, Pool) else str(pool)
    run.trace.system.setdefault("pool_ref", ref)
    answer = extracted_answer(task, run.answer) if run.status == "ok" and run.answer else None
    return Result(task, spec, answer, run, proposal)


@asynccontextmanager
async def opened(pool: PoolRef, cache: bool) -> AsyncIterator[Pool]:
    """`pool` loaded, and closed on leaving, when it is named; a `Pool` given is used as is and left open (its
    own cache setting holds)."""
    if isinstance(pool, Pool):
        yield pool
        return
    loaded = _load_pool(str(pool), cache=cache)
    try:
        yield loaded
    finally:
        await loaded.aclose()


def _task(task: str) -> str:
    """An empty (or blank) task is an error, not a run that spends calls on nothing."""
    if not isinstance(task, str) or not task.strip():
        raise LemonError("the task is empty; pass the task text, e.g. lemon.run(\"What is 12 * 7?\")")
    return task


def sync(coro: Coroutine[object, object, T]) -> T:
    """Run `coro` to its end: on this thread, or on a thread of its own when this one runs an event loop
    already (a notebook), where `asyncio.run` refuses."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lemon-run") as pool:
        return pool.submit(asyncio.run, coro).result()
