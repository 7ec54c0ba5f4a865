"""`lemon explain`: which field of a finished run's spec mattered, and by how much (counterfactual attribution).

For one stored (run, item, seed), every applicable single-field edit of the spec (each edge deleted, each duty
reverted to its base role, each capacity lowered one level; only fields of agents that reach the output) is
re-executed with the run's own worker settings and seed, and scored with the benchmark's own checker.
Delta = correct(original) - correct(edited): +1 means the field was needed for the right answer.

Why it is cheap and exact: the node cache is first PRIMED with the outputs stored in the trace (each keyed on
the request this LEMON would send, which must equal what the trace recorded), so the original run is replayed
with no model call and an edited run calls a model only for the agents whose request changed, i.e. the edited
agent and its descendants (a capacity edit between two levels served by the same model changes nothing). The
cost is therefore known before anything runs (the stored tokens of those agents) and is said up front; the
`max_edits` and `budget_tokens` bounds cut the plan, never a run half-way.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lemon.errors import LemonError, SpecError
from lemon.evaluation.store import ItemRow, ResultsStore, RunInfo
from lemon.llm.base import GenParams, request_key
from lemon.llm.pool import Pool
from lemon.runtime import Budget, Executor, NodeCache, NodeOutput, RunResult, required_agents
from lemon.runtime.rerun import rerun_plan
from lemon.runtime.trace import AgentTokens, Trace
from lemon.spec.edits import FIELD_FAMILIES, applicable_edits, apply_edit, describe_edit
from lemon.spec.model import Spec
from lemon.spec.render import FieldRef
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec

PoolFactory = Callable[[], Pool]


@dataclass
class EditOutcome:
    """One field's edit: what it is, what it would cost, and (once run) what it changed."""

    family: str
    kind: str
    agent: str
    parent: str | None
    edit: str                        # human description, e.g. "delete edge solver -> final"
    affected: list[str]              # agents whose request the edit changes (they call a model)
    estimated_tokens: int
    status: str = "planned"          # planned | ran | invalid | over budget | over max-edits
    note: str = ""
    prediction: str | None = None
    correct: bool | None = None
    delta: float | None = None       # correct(original) - correct(edited)
    tokens: int | None = None        # worker tokens of the edited spec (cached agents included)
    delta_tokens: int | None = None  # tokens(edited) - tokens(original)
    spent_tokens: int | None = None  # tokens actually computed
    calls: int | None = None         # model calls made
    cache_hits: int | None = None    # agents answered from a cache (node cache: no call; LLM cache)
    run_status: str | None = None

    @property
    def field_label(self) -> str:
        return f"{self.kind} {self.agent}" + (f"<-{self.parent}" if self.parent else "")


@dataclass
class Attribution:
    """The attribution of one run item, as stored with the run (`ResultsStore.put_explanation`)."""

    run_id: str | None
    item_id: str
    seed: int
    task: str
    spec: dict[str, Any]
    original: dict[str, Any]
    edits: list[EditOutcome] = field(default_factory=list)
    calls: int = 0
    spent_tokens: int = 0
    created: float = field(default_factory=time.time)

    def planned(self) -> list[EditOutcome]:
        return [e for e in self.edits if e.status == "planned"]

    def estimate(self) -> tuple[int, int, int]:
        """(edits to run, estimated tokens, estimated model calls) of the plan."""
        todo = self.planned()
        return len(todo), sum(e.estimated_tokens for e in todo), sum(len(e.affected) for e in todo)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for e, raw in zip(self.edits, d["edits"], strict=True):
            raw["field"] = e.field_label
        return d


# ---- planning -------------------------------------------------------------------------------------------


def plan_edits(spec: Spec, pool: Pool, roles: RoleLibrary, tokens: Mapping[str, AgentTokens], *, max_edits: int | None,
               budget_tokens: int | None) -> list[EditOutcome]:
    """Every applicable single-field edit of a live field, with its cost, cut by the two bounds in order."""
    levels = pool.level_names
    live = required_agents(spec)
    out: list[EditOutcome] = []
    used = 0
    for family in FIELD_FAMILIES:
        for ref in applicable_edits(spec, family, levels):
            if ref.agent not in live:
                continue
            edited: Spec | None = None
            try:
                edited = validate_spec(apply_edit(spec, ref, levels).spec, roles, levels)
            except SpecError as exc:
                e = EditOutcome(family, ref.kind, ref.agent, ref.parent, f"{ref.kind} {ref.agent}", [], 0,
                                status="invalid", note=str(exc))
                out.append(e)
                continue
            affected, cost = rerun_plan(spec, ref, edited, pool, roles, tokens)
            words = describe_edit(apply_edit(spec, ref, levels))
            e = EditOutcome(family, ref.kind, ref.agent, ref.parent, words, affected, cost)
            if not affected:
                e.note = "both levels are served by the same model: the request does not change"
            n_planned = sum(1 for x in out if x.status == "planned")
            if max_edits is not None and n_planned >= max_edits:
                e.status = "over max-edits"
            elif budget_tokens is not None and used + cost > budget_tokens:
                e.status = "over budget"
            else:
                used += cost
            out.append(e)
    return out


def edited_spec(spec: Spec, e: EditOutcome, levels: Sequence[str], roles: RoleLibrary) -> Spec:
    return validate_spec(apply_edit(spec, FieldRef(e.kind, e.agent, e.parent), levels).spec,  # type: ignore[arg-type]
                         roles, levels)


# ---- replay ---------------------------------------------------------------------------------------------


def prime_cache(executor: Executor, spec: Spec, task: str, seed: int, trace: Trace) -> NodeCache:
    """A node cache holding the stored output of every live model agent, keyed on the request this LEMON sends.

    Refuses (one line) when the trace's recorded prompts or models differ from what would be sent now: the
    stored outputs then belong to other requests, and attributing against them would be wrong.
    """
    cache = NodeCache()
    contents, prompts = trace.contents, trace.prompts
    by_agent = _stored_tokens(trace)
    models = trace.system.get("models") or {}
    # Agents a stop rule left unrun have no output; the replay, under the same rule, does not reach them either.
    live = required_agents(spec) - set(trace.metrics.get("unrun_agents") or ())
    for a in _topological(spec):
        if a.name not in live or executor.roles[a.role].votes:
            continue
        if a.name not in contents:
            raise LemonError(f"the trace has no output of agent {a.name!r}; only runs that finished can be explained")
        parents = {p: contents[p] for p in a.depends_on}
        request = executor.request(a, task, parents, spec, seed)
        backend = executor.pool.backend(a.capacity)
        tok = by_agent.get(a.name) or AgentTokens(prompt=0, completion=0)
        stored_model = models.get(a.capacity)
        if stored_model and stored_model != backend.model_id:
            raise LemonError(f"agent {a.name!r} ran on {stored_model}, but level {a.capacity!r} of pool "
                             f"{executor.pool.name!r} is now {backend.model_id}; explain needs the run's own models")
        recorded = prompts.get(a.name)
        sent = [{"role": m.role, "content": m.content} for m in request.messages]
        if recorded is not None and recorded != sent:
            raise LemonError(f"agent {a.name!r}: this LEMON would send another prompt than the run recorded (role "
                             "prompts changed since); re-run the evaluation, then explain it")
        cache.prime(request_key(backend.model_id, request),
                    NodeOutput(contents[a.name], int(tok.get("prompt", 0)), int(tok.get("completion", 0)),
                               str(tok.get("model") or backend.model_id)))
    return cache


def _stored_tokens(trace: Trace) -> dict[str, AgentTokens]:
    """Per-agent tokens and model: from the trace's metrics, or (older traces) from its return events."""
    found = trace.metrics.get("tokens_by_agent")
    if found:
        return dict(found)
    out: dict[str, AgentTokens] = {}
    for e in trace.events:
        if e.get("type") == "return":
            out[str(e["agent"])] = AgentTokens(prompt=e.get("prompt_tokens", e.get("tokens", 0)),
                                               completion=e.get("completion_tokens", 0))
            if e.get("model") is not None:
                out[str(e["agent"])]["model"] = e["model"]
    return out


def _topological(spec: Spec) -> list[Any]:
    done: set[str] = set()
    order = []
    pending = list(spec.agents)
    while pending:
        for a in list(pending):
            if all(p in done for p in a.depends_on):
                order.append(a)
                done.add(a.name)
                pending.remove(a)
    return order


Checker = Callable[[str], "Any"]


async def _score(check: Checker | None, answer: str, status: str) -> tuple[str | None, bool | None]:
    """(prediction, correct) of an answer; correct is None without a checker (no gold answer)."""
    if check is None:
        return (answer.strip() or None) if status == "ok" else None, None
    if status != "ok" or not answer:
        return None, False
    pred, ok = check(answer)
    if inspect.isawaitable(ok):
        ok = await ok
    return pred, None if ok is None else bool(ok)


async def run_plan(executor: Executor, spec: Spec, task: str, seed: int, attribution: Attribution,
                   cache: NodeCache, *, vote_key: Any, check: Checker | None,
                   on_edit: Callable[[EditOutcome], None] | None = None) -> Attribution:
    """Run each planned edit in turn through the shared cache (one at a time: per-edit calls stay exact)."""
    levels = executor.pool.level_names
    orig_correct = attribution.original.get("correct")
    orig_tokens = int(attribution.original.get("tokens", 0))
    for e in attribution.planned():
        run: RunResult = await executor.run(edited_spec(spec, e, levels, executor.roles), task, seed=seed,
                                            vote_key=vote_key, task_id=attribution.item_id, node_cache=cache)
        e.prediction, e.correct = await _score(check, run.answer, run.status)
        e.status, e.run_status = "ran", run.status
        e.tokens, e.spent_tokens, e.calls = run.total_tokens, run.spent_tokens, run.calls
        e.cache_hits = run.cache_hits + run.llm_cache_hits  # agents answered from the node or the LLM cache
        e.delta_tokens = run.total_tokens - orig_tokens
        if orig_correct is not None and e.correct is not None:
            e.delta = float(orig_correct) - float(e.correct)
        elif e.correct is None:
            e.note = (e.note + "; " if e.note else "") + (
                "answer changed" if e.prediction != attribution.original.get("prediction") else "same answer")
        attribution.calls += run.calls
        attribution.spent_tokens += run.spent_tokens
        if on_edit is not None:
            on_edit(e)
    return attribution


# ---- stored runs ----------------------------------------------------------------------------------------


def executor_for_run(run: RunInfo, pool: Pool, roles: RoleLibrary) -> Executor:
    """An executor with the run's own worker settings (temperature, max tokens, budget, timeout)."""
    params = pool.params(temperature=run.temperature, max_tokens=run.max_tokens)
    return Executor(pool, roles, budget=Budget(max_tokens=run.budget_tokens, call_timeout_s=run.call_timeout_s),
                    params=params)


def spec_of_trace(trace: Trace, roles: RoleLibrary, levels: Sequence[str]) -> Spec:
    topo = trace.topology
    try:
        return validate_spec(Spec.model_validate({"agents": topo.get("agents"), "output": topo.get("output")}),
                             roles, levels)
    except (ValueError, SpecError) as exc:
        raise LemonError(f"the trace's spec does not validate against this pool ({' '.join(str(exc).split())[:200]})"
                         ) from None


def load_item(run: RunInfo, item_id: str, data_dir: Any) -> Any:
    from lemon.benchmarks.registry import load_split

    for item in load_split(run.benchmark, run.split, data_dir=data_dir):
        if str(item.id) == item_id:
            return item
    raise LemonError(f"item {item_id} is not in {run.benchmark}/{run.split} of the data directory; pass the "
                     "--data-dir the run used")


@dataclass
class StoredPlan:
    """A planned explanation of a stored item, ready to run (the CLI prints its estimate first)."""

    attribution: Attribution
    executor: Executor
    spec: Spec
    cache: NodeCache
    seed: int
    vote_key: Any
    check: Checker | None


def plan_stored(run: RunInfo, row: ItemRow, trace: Trace, pool: Pool, *, data_dir: Any = None,
                max_edits: int | None = None, budget_tokens: int | None = None) -> StoredPlan:
    """Everything needed to explain (run, item, seed): spec, task, checker, primed cache, and the edit plan."""
    from lemon.benchmarks.registry import get_benchmark
    from lemon.evaluation.item import item_seed

    if row.status != "ok":
        raise LemonError(f"item {row.item_id} seed {row.seed} ended with status {row.status} ({row.stop_reason}); "
                         "only runs that finished can be explained")
    roles = RoleLibrary.load()
    task_def = get_benchmark(run.benchmark)
    item = load_item(run, row.item_id, data_dir)
    task = trace.task or task_def.prompt(item)
    spec = spec_of_trace(trace, roles, pool.level_names)
    executor = executor_for_run(run, pool, roles)
    seed = int(trace.system.get("seed", item_seed(run.benchmark, item.id, row.seed)))
    cache = prime_cache(executor, spec, task, seed, trace)

    def check(answer: str) -> tuple[str | None, Any]:
        pred = task_def.extract(answer, item)
        if pred is None:
            return None, False
        if task_def.sandboxed:
            return pred, asyncio.to_thread(task_def.check, pred, item)
        return pred, task_def.check(pred, item)

    edits = plan_edits(spec, pool, roles, _stored_tokens(trace), max_edits=max_edits, budget_tokens=budget_tokens)
    attribution = Attribution(run_id=run.run_id, item_id=row.item_id, seed=row.seed, task=task,
                              spec=spec.model_dump(mode="json"),
                              original={"correct": row.correct, "prediction": row.prediction, "gold": row.gold,
                                        "tokens": row.total_tokens, **_early_stops(trace)},
                              edits=edits)
    return StoredPlan(attribution, executor, spec, cache, seed, lambda text: task_def.extract(text, item), check)


def _early_stops(trace: Trace) -> dict[str, object]:
    """The original run's stop-rule decisions and the agents they left unrun (shown beside the attribution:
    an edit of an agent that never ran changes nothing)."""
    from lemon.inspection.itemview import stop_rule_events

    stops = stop_rule_events(trace)
    return {"stop_rules": stops, "unrun_agents": list(trace.metrics.get("unrun_agents") or ())} if stops else {}


def gold_checker(kind: str, gold: str | None) -> Checker:
    """(extracted answer, right) of an answer of this kind; right is None without a gold answer (or for code,
    which only a benchmark's tests can judge), and the edits then say whether the extracted answer changed."""
    from lemon.inspection.tracefile import answer_extractor
    from lemon.orchestrator.kinds import find_kind

    extract = answer_extractor(kind) or (lambda text: text.strip() or None)
    found = find_kind(kind)
    graded = found.check_gold if found is not None else None

    def check(answer: str) -> tuple[str | None, bool | None]:
        pred = extract(answer)
        if gold is None or graded is None:
            return pred, None
        return pred, pred is not None and graded(pred, gold)

    return check


def plan_trace(run: RunInfo, row: ItemRow, trace: Trace, pool: Pool, *, gold: str | None = None,
               max_edits: int | None = None, budget_tokens: int | None = None) -> StoredPlan:
    """`plan_stored` for a `lemon run` trace (no benchmark item): the task and settings come from the trace, the
    answer is read by the task's kind, and without `gold` each edit says whether the answer changed."""
    from lemon.inspection.tracefile import vote_key

    if row.status != "ok":
        raise LemonError(f"the run {run.run_id} ended with status {row.status} ({row.stop_reason}); only runs that "
                         "finished can be explained")
    roles = RoleLibrary.load()
    task, system = trace.task or "", trace.system
    if not task:
        raise LemonError(f"the trace of run {run.run_id} does not hold its task text (an older LEMON); re-run it")
    spec = spec_of_trace(trace, roles, pool.level_names)
    executor = executor_for_run(run, pool, roles)
    seed = int(system.get("seed") or 0)
    cache = prime_cache(executor, spec, task, seed, trace)
    check = gold_checker(run.split, gold)
    correct = check(trace.contents.get(spec.final_agent(), ""))[1]
    edits = plan_edits(spec, pool, roles, _stored_tokens(trace), max_edits=max_edits, budget_tokens=budget_tokens)
    attribution = Attribution(run_id=run.run_id, item_id=row.item_id, seed=row.seed, task=task,
                              spec=spec.model_dump(mode="json"),
                              original={"correct": correct, "prediction": row.prediction, "gold": gold,
                                        "tokens": row.total_tokens, **_early_stops(trace)},
                              edits=edits)
    return StoredPlan(attribution, executor, spec, cache, seed, vote_key(run.split), check)


async def explain_stored(db: ResultsStore, plan: StoredPlan,
                         on_edit: Callable[[EditOutcome], None] | None = None) -> Attribution:
    """Replay the original from the primed cache (no model call), run the plan, store the result with the run."""
    replay = await plan.executor.run(plan.spec, plan.attribution.task, seed=plan.seed, vote_key=plan.vote_key,
                                     node_cache=plan.cache)
    if replay.calls:
        raise LemonError(f"replaying the stored run needed {replay.calls} model call(s): its trace does not match "
                         "this LEMON's requests; re-run the evaluation, then explain it")
    result = await run_plan(plan.executor, plan.spec, plan.attribution.task, plan.seed, plan.attribution,
                            plan.cache, vote_key=plan.vote_key, check=plan.check, on_edit=on_edit)
    assert result.run_id is not None
    db.put_explanation(result.run_id, result.item_id, result.seed, result.to_json())
    return result


# ---- a spec file and a task (no store) ------------------------------------------------------------------


async def explain_spec(spec: Spec, task: str, pool: Pool, *, seed: int = 0, params: GenParams | None = None,
                       gold: str | None = None, max_edits: int | None = None, budget_tokens: int | None = None,
                       on_plan: Callable[[Attribution], None] | None = None,
                       on_edit: Callable[[EditOutcome], None] | None = None) -> Attribution:
    """Run `spec` on `task`, then each applicable edit; with `gold` the edits are scored right/wrong,
    without it each says whether the answer changed. Answers are read, and votes compared, by the task's kind
    (`lemon.execute`'s recipe: whole-text votes never agreed on sampled replies)."""
    from lemon.orchestrator.kinds import reply_extractor, task_kind

    roles = RoleLibrary.load()
    executor = Executor(pool, roles, params=params or pool.defaults)
    cache = NodeCache()
    kind = task_kind(task)
    vote_key = reply_extractor(kind)
    original = await executor.run(spec, task, seed=seed, node_cache=cache, vote_key=vote_key)
    if original.status != "ok":
        raise LemonError(f"the spec's own run stopped ({original.status}: {original.stop_reason}); nothing to explain")
    check = gold_checker(kind, gold)
    pred, correct = await _score(check, original.answer, original.status)
    attribution = Attribution(run_id=None, item_id="task", seed=seed, task=task, spec=spec.model_dump(mode="json"),
                              original={"correct": correct, "prediction": pred, "gold": gold,
                                        "tokens": original.total_tokens, "calls": original.calls},
                              edits=plan_edits(spec, pool, roles, original.tokens_by_agent, max_edits=max_edits,
                                               budget_tokens=budget_tokens))
    if on_plan is not None:
        on_plan(attribution)
    return await run_plan(executor, spec, task, seed, attribution, cache, vote_key=vote_key, check=check,
                          on_edit=on_edit)
