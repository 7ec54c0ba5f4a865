"""The DAG executor: run a validated spec against a pool, as parallel as its graph allows.

Each agent starts the moment its last parent returns (not level by level); concurrency is bounded per
capacity level. An agent's request is fully determined by its model, its role/duty, the task, its parents'
outputs and the generation parameters (the per-agent seed is derived from the run seed and the agent's
name), so its key in the node cache changes exactly when something upstream of it changed.
Agents that cannot reach the output are not run (they could not change the answer): they are recorded as
`despawn` events. A run that hits its token budget, a call timeout or a backend error stops with that
status, keeps the partial trace and says why; it never fails silently.
Budgets cap (see `budget.py`): each call reserves its worst case on the run's ledger (and on a shared one, e.g.
an evaluation's) before it is sent, with `max_tokens` clipped to what remains; a clipped request has its own
node-cache key, so a truncated answer is never served to a run that could afford the full one.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Literal, cast

from lemon.errors import LemonError
from lemon.llm.base import Backend, ChatRequest, GenParams, Message, Scorer, request_key
from lemon.llm.pool import Pool
from lemon.runtime import programs
from lemon.runtime.budget import (
    Budget,
    BudgetExhausted,
    TokenLedger,
    prompt_token_bound,
    reserve_all,
    settle_all,
)
from lemon.runtime.examples_gate import TaskExamples, passes_examples
from lemon.runtime.node_cache import NodeCache, NodeOutput
from lemon.runtime.stop_rules import RunStopView, SureGate
from lemon.runtime.trace import AgentTokens, StopDecision, TopologyAgent, Trace, TraceEvent
from lemon.seeds import stable_seed
from lemon.spec.forward import Forward
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.render import render_stop
from lemon.spec.roles import RoleLibrary
from lemon.spec.stops import StopCriterion
from lemon.spec.stops.confidence import majority_probability  # noqa: F401  (re-exported: the criterion's math)
from lemon.yamlfile import load_yaml

Status = Literal["ok", "budget_exceeded", "timeout", "error"]
EventHook = Callable[[TraceEvent], None]
VoteKey = Callable[[str], "str | None"]


@dataclass(frozen=True, slots=True)
class AgentPrompts:
    system_with_duty: str
    user_alone: str
    user_with_parents: str
    parent_block: str

    @classmethod
    def load(cls) -> AgentPrompts:
        data = load_yaml((resources.files("lemon.runtime") / "prompts.yaml").read_text("utf-8"))
        return cls(**{k: data[k] for k in cls.__slots__})


@dataclass
class RunResult:
    answer: str
    status: Status
    stop_reason: str
    tokens_by_agent: dict[str, AgentTokens]
    tokens_by_level: dict[str, int]
    wall_s: float
    trace: Trace
    outputs: dict[str, str]
    calls: int                 # requests sent to a backend in this run
    cache_hits: int            # agents served from the node cache
    llm_cache_hits: int = 0    # backend requests answered by the persistent LLM cache
    spent_tokens: int = 0      # tokens of calls actually computed in this run (no cache of either kind)
    skipped: tuple[str, ...] = ()
    # Tokens charged to the run's budget: every agent's tokens, plus the reservation of any call that was cut
    # off in flight (a stopped run may still be billed for it).
    charged_tokens: int = 0
    budget_scope: str | None = None  # for status budget_exceeded: which ledger ran out ("run", "eval", ...)
    unrun: tuple[str, ...] = ()  # needed agents a stop rule made unnecessary (never started)
    early_stops: tuple[StopDecision, ...] = ()  # each stop rule's decision (see `_record_early_stop`)

    @property
    def total_tokens(self) -> int:
        """What the spec costs: the tokens of every agent that ran, cached or not."""
        return sum(t["prompt"] + t["completion"] for t in self.tokens_by_agent.values())


class _Stop(Exception):
    def __init__(self, status: Status, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.scope = scope


def derive_seed(seed: int, agent: str) -> int:
    """A per-agent sampling seed: same (run seed, agent slot) -> same seed, across processes."""
    return stable_seed(seed, agent)


def sample_slot(spec: Spec, name: str, draw_order: Sequence[int] = ()) -> str:
    """What an agent's sampling seed is derived from: its role and its rank among the spec's agents of that
    role, in written order (`math_solver#2` is the third math solver).

    Not its name, and not its duty or level: so the k-th sample of a role on a task is the same draw in every
    team that has one (a 3-vote's voters are the first three of a 5-vote's, a stop rule's parents are a
    prefix of the full vote's), which is what makes the LLM request cache a sample bank; and renaming an
    agent, or an edit of another agent's duty, level or edges, never changes which sample an agent draws.

    `draw_order` (a permutation of range(n)) sends the agent of rank r < n to draw r's sample instead: the same
    draws of the item in another order. Under exchangeable draws that is another equally likely run, and over a
    sample bank of n draws it costs no worker call (training's `workers.seeds: bank` with `samples` > 1)."""
    agent = spec.agent(name)
    rank = 0
    for a in spec.agents:
        if a.name == name:
            break
        rank += a.role == agent.role
    if rank < len(draw_order):
        rank = draw_order[rank]
    return f"{agent.role}#{rank}"


def check_draw_order(draw_order: Sequence[int]) -> tuple[int, ...]:
    """`draw_order` as a tuple, or ValueError if it is not a permutation of range(len(draw_order))."""
    order = tuple(draw_order)
    if sorted(order) != list(range(len(order))):
        raise ValueError(f"draw_order must be a permutation of 0..{len(order) - 1}, got {order}")
    return order


def required_agents(spec: Spec) -> frozenset[str]:
    """The output agent and every agent it (transitively) depends on."""
    parents = {a.name: a.depends_on for a in spec.agents}
    out: set[str] = set()
    stack = [spec.final_agent()]
    while stack:
        cur = stack.pop()
        if cur not in out:
            out.add(cur)
            stack.extend(parents[cur])
    return frozenset(out)


def eager_agents(spec: Spec, needed: frozenset[str]) -> frozenset[str]:
    """The needed agents that run whatever a stop rule decides: the output's ancestors reached without going
    through a stop rule's parents (those start only when the rule's agent asks for them)."""
    out: set[str] = set()
    stack = [spec.final_agent()]
    while stack:
        cur = stack.pop()
        if cur in out or cur not in needed:
            continue
        out.add(cur)
        agent = spec.agent(cur)
        if agent.stop is None:
            stack.extend(agent.depends_on)
    return frozenset(out)


def stop_rule_fires(rule: StopRule, keys: list[str | None]) -> bool:
    """Whether `rule`'s criterion is satisfied by the answers (vote keys) of the parents run so far (a gate
    alone has none: only a sure parent fires it, see `stop_rules`)."""
    return rule.fires(keys)


def majority_vote(texts: list[str], key: VoteKey | None) -> str:
    """The first text whose key (extracted answer) is the most common; ties go to the earliest parent."""
    keys = [(key(t) if key else " ".join(t.split())) for t in texts]
    counts = Counter(k for k in keys if k)
    if not counts:
        return texts[0] if texts else ""
    best = max(counts.values())
    winner = next(k for k in keys if k and counts[k] == best)
    return texts[keys.index(winner)]


class Executor:
    """Runs specs on `pool`. One executor may run many specs concurrently (e.g. an evaluation)."""

    def __init__(self, pool: Pool, roles: RoleLibrary, *, node_cache: NodeCache | None = None,
                 budget: Budget | None = None, params: GenParams | None = None,
                 on_event: EventHook | None = None) -> None:
        self.pool = pool
        self.roles = roles
        self.node_cache = node_cache
        self.budget = budget or Budget()
        self.params = params or pool.defaults
        self.on_event = on_event
        self.prompts = AgentPrompts.load()
        self._sems: dict[str, asyncio.Semaphore] = {}

    def _sem(self, level: str) -> asyncio.Semaphore:
        if level not in self._sems:
            self._sems[level] = asyncio.Semaphore(self.pool.level(level).concurrency)
        return self._sems[level]

    def messages(self, agent: Agent, task: str, parents: Mapping[str, str], spec: Spec) -> tuple[Message, ...]:
        """The system and user messages of `agent`, given its parents' outputs (in depends_on order)."""
        p = self.prompts
        base = self.roles[agent.role].system_prompt
        system = p.system_with_duty.format(system_prompt=base, duty=agent.duty) if agent.duty else base
        if not agent.depends_on:
            user = p.user_alone.format(task=task)
        else:
            blocks = "\n\n".join(p.parent_block.format(name=n, role=spec.agent(n).role, text=parents[n].strip())
                                 for n in agent.depends_on)
            user = p.user_with_parents.format(task=task, parents=blocks)
        return (Message("system", system), Message("user", user))

    def request(self, agent: Agent, task: str, parents: Mapping[str, str], spec: Spec, seed: int,
                draw_order: Sequence[int] = (), params: GenParams | None = None) -> ChatRequest:
        """`agent`'s request: `params` (else the executor's) with the agent's sampling seed."""
        params = params or self.params
        slot = sample_slot(spec, agent.name, draw_order)
        params = replace(params, seed=derive_seed(seed, slot) if params.temperature > 0 else None)
        return ChatRequest(self.messages(agent, task, parents, spec), params)

    async def run(self, spec: Spec, task: str, *, seed: int = 0, vote_key: VoteKey | None = None,
                  task_id: str | None = None, orchestrator: Mapping[str, object] | None = None,
                  node_cache: NodeCache | None = None, shared_budget: TokenLedger | None = None,
                  draw_order: Sequence[int] = (), max_tokens: int | None = None) -> RunResult:
        """Execute `spec` (already validated) on `task`; never raises for budget, timeout or backend errors.

        `draw_order` permutes which sample each agent of a role draws (`sample_slot`); () is written order.

        `max_tokens` is this run's worker reply limit (None: the executor's): one executor runs a training
        mixture whose benchmarks need different reply lengths (AQuA 1,024, GSM8K 384), as `lemon eval` gives them.

        `shared_budget` is charged every call too (e.g. a whole evaluation's cap); it never clips a call, only
        refuses it (the run then stops with status budget_exceeded and `budget_scope` = its scope).
        """
        cache = node_cache if node_cache is not None else self.node_cache
        ledgers = [TokenLedger(self.budget.max_tokens, "run")]
        if shared_budget is not None:
            ledgers.append(shared_budget)
        if max_tokens is not None and max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, not {max_tokens}")
        params = self.params if max_tokens is None else replace(self.params, max_tokens=max_tokens)
        return await _Run(self, spec, task, seed, vote_key, task_id, orchestrator,
                          cache if cache is not None else NodeCache(), tuple(ledgers), params,
                          check_draw_order(draw_order)).execute()


@dataclass
class _Run:
    ex: Executor
    spec: Spec
    task: str
    seed: int
    vote_key: VoteKey | None
    task_id: str | None
    orchestrator: Mapping[str, object] | None
    cache: NodeCache
    ledgers: tuple[TokenLedger, ...]  # the run's own first (it may clip), then shared ones (they never clip)
    params: GenParams  # the workers' sampling parameters (the executor's, or with the run's own reply limit)
    draw_order: tuple[int, ...] = ()  # which banked draw each agent of a role takes (`sample_slot`)
    trace: Trace = field(init=False)
    outputs: dict[str, str] = field(default_factory=dict)
    replies: dict[str, str] = field(default_factory=dict)  # what each model wrote (a gate scores this)
    logprobs: dict[str, float] = field(default_factory=dict)  # each reply's log-probability from its generation
    returns: dict[str, TraceEvent] = field(default_factory=dict)
    tokens: dict[str, AgentTokens] = field(default_factory=dict)
    spent_tokens: int = 0
    budget_scope: str | None = None
    calls: int = 0
    hits: int = 0
    llm_hits: int = 0
    sent_at: dict[str, float] = field(default_factory=dict)  # when each agent's call left its level's queue
    # Each model-calling agent's backend and request as sent (a stop rule's logprob gate scores its reply).
    requests: dict[str, tuple[Backend, ChatRequest]] = field(default_factory=dict)
    early_stops: list[StopDecision] = field(default_factory=list)
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _tg: asyncio.TaskGroup = field(init=False)
    _decision: TraceEvent | None = None

    def __post_init__(self) -> None:
        self.trace = Trace(task_id=self.task_id, task=self.task)

    pool = Forward[Pool]("ex.pool")
    roles = Forward[RoleLibrary]("ex.roles")

    def _emit(self, type_: str, agent: str, **extra: object) -> TraceEvent:
        ev = self.trace.event(type_, agent, **extra)
        if self.ex.on_event is not None:
            self.ex.on_event(ev)
        return ev

    async def execute(self) -> RunResult:
        spec, ex = self.spec, self.ex
        start = time.perf_counter()
        output = spec.final_agent()
        needed = required_agents(spec)
        t = self.trace
        t.system = {"pool": ex.pool.name, "levels": list(ex.pool.level_names), "seed": self.seed,
                    "temperature": self.params.temperature, "max_tokens": self.params.max_tokens,
                    "models": {lv.name: lv.backend.model_id for lv in ex.pool.levels}}
        if self.draw_order:
            t.system["draw_order"] = list(self.draw_order)
        t.topology = {"agents": [cast(TopologyAgent, a.model_dump(mode="json")) for a in spec.agents],
                      "output": output, "edges": [[p, a.name] for a in spec.agents for p in a.depends_on]}
        decision = self._emit("orchestrator_decision", "orchestrator", **(self.orchestrator or {})) \
            if self.orchestrator is not None else None
        skipped = tuple(a.name for a in spec.agents if a.name not in needed)
        for name in skipped:
            self._emit("despawn", name, reason="not an ancestor of the output agent; not run")
        status, reason = await self._run_agents(needed, decision)
        unrun = tuple(a.name for a in spec.agents if a.name in needed and a.name not in self._tasks)
        for name in unrun if status == "ok" else ():
            self._emit("despawn", name, reason="not run: a stop rule fired before it was needed")
        answer = self.outputs.get(output, "") if status == "ok" else ""
        if status == "ok":
            agg = self._emit("aggregate", output, **{"from": list(spec.agent(output).depends_on)})
            self.trace.edge(self.returns[output], agg, "aggregate")
        stop_kind = {"ok": "final_answer", "budget_exceeded": "budget", "timeout": "timeout", "error": "error"}
        stop_ev = self._emit("stop", output if status == "ok" else "runtime", reason=stop_kind[status],
                             detail=reason)
        if len(self.trace.events) > 1 and self.trace.events[-2]["type"] != "stop":  # a run refused at once has none
            self.trace.edge(self.trace.events[-2], stop_ev, "temporal")
        wall = time.perf_counter() - start
        by_level: dict[str, int] = {}
        for tok in self.tokens.values():
            by_level[tok["capacity"]] = by_level.get(tok["capacity"], 0) + tok["prompt"] + tok["completion"]
        messages = sum(1 for e in self.trace.events if e["type"] == "message")
        t.costs = {"tokens": sum(by_level.values()), "spent_tokens": self.spent_tokens, "wall_clock_s": wall,
                   "messages": messages, "calls": self.calls, "charged_tokens": self.ledgers[0].used}
        t.metrics = {"status": status, "node_cache_hits": self.hits, "llm_cache_hits": self.llm_hits,
                     "tokens_by_level": by_level, "skipped_agents": list(skipped),
                     "tokens_by_agent": self.tokens, "unrun_agents": list(unrun),
                     "early_stops": self.early_stops}
        t.contents = dict(self.outputs)
        return RunResult(answer=answer, status=status, stop_reason=reason, tokens_by_agent=self.tokens,
                         tokens_by_level=by_level, wall_s=wall, trace=t, outputs=dict(self.outputs),
                         calls=self.calls, cache_hits=self.hits, llm_cache_hits=self.llm_hits,
                         spent_tokens=self.spent_tokens, skipped=skipped, charged_tokens=self.ledgers[0].used,
                         budget_scope=self.budget_scope, unrun=unrun, early_stops=tuple(self.early_stops))

    async def _run_agents(self, needed: frozenset[str], decision: TraceEvent | None) -> tuple[Status, str]:
        """Run the needed agents, each as soon as its parents return; the first stop cancels the rest.

        Agents needed only through a stop rule start when their voter asks for them (`_start`), so parents
        the rule never reaches are never run."""
        self._decision = decision
        eager = eager_agents(self.spec, needed)
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                for a in self.spec.agents:  # validated specs may list a child before its parent: wait on futures
                    if a.name in eager:
                        self._start(a.name)
        except BaseExceptionGroup as group:
            stop, others = group.split(_Stop)
            if others is not None:
                raise _unwrap(others) from None
            assert stop is not None
            first = _unwrap(stop)
            assert isinstance(first, _Stop)
            self.budget_scope = first.scope
            return first.status, first.reason
        return "ok", "final answer"

    def _start(self, name: str) -> asyncio.Task[None]:
        """The task running agent `name`, created on first demand."""
        if name not in self._tasks:
            self._tasks[name] = self._tg.create_task(self._agent(self.spec.agent(name)), name=name)
        return self._tasks[name]

    async def _parents_of(self, agent: Agent) -> dict[str, str]:
        """Every parent's output (a stop rule's voter asks for its parents in waves instead)."""
        if agent.stop is not None:
            return await self._parents_until_stop(agent, agent.stop)
        for t in [self._start(p) for p in agent.depends_on]:
            await t
        return {p: self.outputs[p] for p in agent.depends_on}

    async def _parents_until_stop(self, agent: Agent, rule: StopRule) -> dict[str, str]:
        """Parents in written order, in waves, until `rule` fires on their answers or `max` have run.

        With a gate, each wave's parents are checked first, as the gate's criterion object scores them through
        this run's `StopView` (`lemon.spec.stops`: a `logprob` gate scores replies, an `examples` gate runs
        programs on the task's examples); the first sure one fires the rule and the vote sees it alone; else the
        rule's criterion decides, if it has one, through the same view (`posterior` reads the replies' scores).
        A gate or criterion that cannot run on this pool is refused before any parent runs."""
        order = agent.depends_on[:rule.max or len(agent.depends_on)]
        if rule.controller is not None:
            return await self._parents_by_controller(agent, rule, order)
        view, gate, sure = RunStopView(self, agent), rule.gate, None
        for part in (gate, rule.criterion):  # what cannot run on this pool is refused before any parent runs
            if part is not None and (refusal := await part[0].refusal(part[1], view, agent.name, order)):
                raise _Stop("error", refusal)
        if gate is not None:
            sure = SureGate(gate[0].threshold(gate[1]))
        ran: list[str] = []
        width = rule.first_wave
        fired = False
        while len(ran) < len(order) and not fired:
            wave = order[len(ran):len(ran) + width]
            for t in [self._start(p) for p in wave]:
                await t
            ran.extend(wave)
            width = rule.wave
            fired = (gate is not None and sure is not None and await self._gate_wave(gate, view, wave, sure)) or \
                await rule.decides(view, ran)
        self._record_early_stop(agent, rule, tuple(ran), fired, sure)
        return {p: self.outputs[p] for p in ([sure.sure] if sure is not None and sure.sure else ran)}

    async def _parents_by_controller(self, agent: Agent, rule: StopRule, order: tuple[str, ...]) -> dict[str, str]:
        """Parents chosen one at a time by the rule's controller (`learned`): the one it opens with (the first in
        written order unless it decides), then whichever it asks for, until it stops or none is left; each decision
        goes into the rule's stop event."""
        control, value = rule.controller  # type: ignore[misc]
        view, decisions = RunStopView(self, agent), []
        try:
            first, opened = control.first_parent(value, view, order)
        except LemonError as exc:
            raise _Stop("error", f"the stop rule of {agent.name!r}: {exc}") from None
        ran = [first]
        if opened is not None:
            decisions.append(opened)
        while True:
            await self._start(ran[-1])
            try:
                chosen, decision = await control.next_parent(value, view, agent.name, tuple(ran), order)
            except LemonError as exc:
                raise _Stop("error", f"the stop rule of {agent.name!r}: {exc}") from None
            decisions.append(decision)
            if chosen is None:
                break
            ran.append(chosen)
        self._record_early_stop(agent, rule, tuple(ran), len(ran) < len(order), decisions=decisions)
        return {p: self.outputs[p] for p in ran}

    async def _gate_wave(self, gate: tuple[StopCriterion, object], view: RunStopView, wave: tuple[str, ...],
                         sure: SureGate) -> bool:
        """The gate's scores of `wave`'s parents in written order, until one is sure (True)."""
        for p in wave:
            if sure.record(p, await gate[0].score(gate[1], view, p)):
                return True
        return False

    async def score_reply(self, agent: Agent, p: str) -> float | None:
        """Parent `p`'s reply scored under its model (None: it calls no model, so it is never sure): the
        log-probability its backend read from the generation, else one scoring pass. A score costs no tokens
        and no budget (see `stop_rules`); a pass runs under the level's concurrency and the call timeout, and
        its failure stops the run as a failed call would."""
        if p not in self.requests:
            return None
        if (read := self.logprobs.get(p)) is not None:
            return read
        backend, request = self.requests[p]
        level = self.spec.agent(p).capacity
        what = f"scoring agent {p!r} ({level}) for the stop rule of {agent.name!r}"
        async with self.ex._sem(level):
            try:
                return await asyncio.wait_for(cast(Scorer, backend).score(request, self.replies[p]),
                                              self.ex.budget.call_timeout_s)
            except TimeoutError:
                raise _Stop("timeout", f"{what} took longer than {self.ex.budget.call_timeout_s}s") from None
            except LemonError as exc:
                raise _Stop("error", f"{what}: {exc}") from None

    async def check_examples(self, p: str, examples: TaskExamples) -> bool:
        """Whether parent `p`'s program passes the task's examples: off the event loop, under the parent's
        level's concurrency; no tokens."""
        async with self.ex._sem(self.spec.agent(p).capacity):
            return await asyncio.to_thread(passes_examples, self.outputs[p], examples)

    def _vote_key_of(self, text: str) -> str | None:
        return self.vote_key(text) if self.vote_key else " ".join(text.split())

    def _record_early_stop(self, agent: Agent, rule: StopRule, ran: tuple[str, ...], fired: bool,
                           gate: SureGate | None = None, decisions: list[dict[str, object]] | None = None) -> None:
        """The rule's decision as a `stop` event: the rule, whether it fired (or `max` was reached first), the
        parents run and skipped, the tokens it saved (estimated as the mean of the parents that ran, per skipped
        parent); with a gate, the parents' scores and the sure parent (None when none was)."""
        skipped = tuple(p for p in agent.depends_on if p not in ran)
        per_parent = [self.tokens[p]["prompt"] + self.tokens[p]["completion"] for p in ran]
        saved = round(sum(per_parent) / len(per_parent) * len(skipped)) if per_parent and skipped else 0
        decision = StopDecision(agent=agent.name, rule=render_stop(rule), fired=fired, ran=list(ran),
                                skipped=list(skipped), tokens_saved_estimate=saved)
        if gate is not None:
            decision["scores"], decision["sure"] = dict(gate.scores), gate.sure
        if decisions is not None:  # a controller's: each decision's inputs, action and probability
            decision["decisions"] = decisions
        self._emit("stop", agent.name, reason="stop_rule",
                   **{k: v for k, v in decision.items() if k != "agent"})
        self.early_stops.append(decision)

    async def _agent(self, agent: Agent) -> None:
        parents = await self._parents_of(agent)
        ex = self.ex
        role = ex.roles[agent.role]
        spawn = self._emit("spawn", agent.name, role=agent.role, capacity=agent.capacity, duty=agent.duty or None)
        if self._decision is not None:
            self.trace.edge(self._decision, spawn, "spawn")
        for p in parents:
            msg = self._emit("message", agent.name, **{"from": p, "to": agent.name, "content_ref": f"contents/{p}"})
            self.trace.edge(self.returns[p], msg, "message")
            self.trace.edge(msg, spawn, "causal")
        if role.votes:
            text = majority_vote(list(parents.values()), self.vote_key)
            out, hit = NodeOutput(text, 0, 0, "vote"), False
            votes = {p: self.vote_key(t) if self.vote_key else " ".join(t.split())[:200] for p, t in parents.items()}
        else:
            out, hit = await self._call(agent, parents)
            votes = None
        hit = hit or out.llm_cached  # answered from a cache: the node cache (no call) or the LLM request cache
        self.outputs[agent.name] = out.text
        self.replies[agent.name] = out.reply if out.reply is not None else out.text
        if out.logprob is not None:
            self.logprobs[agent.name] = out.logprob
        self.tokens[agent.name] = AgentTokens(prompt=out.prompt_tokens, completion=out.completion_tokens,
                                              capacity=agent.capacity, cached=hit, model=out.model)
        sampled = self.requests.get(agent.name)
        params = None if votes is not None or sampled is None else sampling_of(sampled[1].params)
        ret = self._emit("return", agent.name, tokens=out.tokens, cached=hit, content_ref=f"contents/{agent.name}",
                         prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens, model=out.model,
                         sent=self.sent_at.get(agent.name), votes=votes,
                         **({"logprob": round(out.logprob, 4)} if out.logprob is not None else {}),
                         **({"params": params} if params is not None else {}))
        self.returns[agent.name] = ret
        self.trace.edge(spawn, ret, "return")
        for ledger in self.ledgers:  # only a backend that ignores max_tokens (or the prompt bound) gets here
            if ledger.cap is not None and ledger.used > ledger.cap:
                raise _Stop("budget_exceeded", f"{ledger.scope} token budget exceeded: {ledger.used} > "
                                               f"{ledger.cap} tokens after agent {agent.name!r} (its backend "
                                               "did not honour max_tokens)", ledger.scope)

    async def _reserve(self, agent: Agent, request: ChatRequest) -> tuple[ChatRequest, int]:
        """Reserve the call's worst case on every ledger; the request comes back with max_tokens clipped to
        what the budget allows. `_Stop` when not even one completion token fits."""
        bound = prompt_token_bound(request.messages)
        want = request.params.max_tokens
        clip = [i == 0 for i in range(len(self.ledgers))]
        try:
            held = await reserve_all(self.ledgers, bound + 1, bound + want, what=f"agent {agent.name!r}", clip=clip)
        except BudgetExhausted as exc:
            raise _Stop("budget_exceeded", str(exc), exc.scope) from None
        if held - bound < want:
            request = replace(request, params=replace(request.params, max_tokens=held - bound))
        return request, held

    async def _call(self, agent: Agent, parents: dict[str, str]) -> tuple[NodeOutput, bool]:
        ex = self.ex
        backend = ex.pool.backend(agent.capacity)
        request, held = await self._reserve(agent, ex.request(agent, self.task, parents, self.spec, self.seed,
                                                              self.draw_order, self.params))
        key = request_key(backend.model_id, request)
        self.requests[agent.name] = (backend, request)
        sent = False
        self.trace.prompts[agent.name] = [{"role": m.role, "content": m.content} for m in request.messages]

        async def compute() -> NodeOutput:
            nonlocal sent
            async with ex._sem(agent.capacity):
                self.calls += 1
                sent = True
                self.sent_at[agent.name] = round(time.perf_counter() - self.trace._t0, 6)
                try:
                    c = await asyncio.wait_for(backend.complete(request), ex.budget.call_timeout_s)
                except TimeoutError:
                    raise _Stop("timeout", f"agent {agent.name!r} ({agent.capacity}) took longer than "
                                           f"{ex.budget.call_timeout_s}s") from None
                except LemonError as exc:
                    raise _Stop("error", f"agent {agent.name!r}: {exc}") from None
            if c.cached:
                self.llm_hits += 1
            else:
                self.spent_tokens += c.total_tokens
            if ex.roles[agent.role].runs_program:  # its code runs as its level's calls do, bounded
                async with ex._sem(agent.capacity):
                    try:
                        text = await programs.run_reply(c.text)
                    except LemonError as exc:  # no sandbox on this machine: the run fails, loudly
                        raise _Stop("error", f"agent {agent.name!r}: {exc}") from None
                return NodeOutput(text, c.prompt_tokens, c.completion_tokens, c.model, c.cached, reply=c.text,
                                  logprob=c.logprob)
            return NodeOutput(c.text, c.prompt_tokens, c.completion_tokens, c.model, c.cached, logprob=c.logprob)

        spent: int | None = None
        try:
            out, hit = await self.cache.get_or_compute(key, compute)
            spent = out.tokens
        finally:  # a call cut off after it was sent may still be billed: then charge its worst case
            settle_all(self.ledgers, held, spent if spent is not None else held if sent else 0)
        if hit:
            self.hits += 1
        return out, hit


def sampling_of(params: GenParams) -> dict[str, float | int | None]:
    """The sampling settings of one call as its trace records them: what a reader needs to see how the reply
    was drawn, and whether it stopped at its `max_tokens` (which a budget may have clipped below the run's)."""
    return {"temperature": params.temperature, "max_tokens": params.max_tokens, "top_p": params.top_p,
            "seed": params.seed}


def _unwrap(group: BaseException) -> BaseException:
    """The first leaf exception of a (nested) exception group."""
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group
