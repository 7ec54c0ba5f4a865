"""Which agents a counterfactual re-run recomputes, and what it will cost: one answer for the trainer's budget
(`train.rollout`) and `lemon explain`'s plan (`inspection.explain`), which used to compute it twice.

Everything else of an edited spec is a node-cache hit: an edit changes the request of its own agent and,
through its output, of every descendant the edited spec still runs. Two exceptions: an edit that changes no
request (its family says so: a capacity move between two levels one model serves); and removing or
loosening a stop rule may start parents the original rule left unrun (none of them was run, so each is
priced as the mean parent that ran)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from lemon.llm.pool import Pool
from lemon.runtime.executor import required_agents
from lemon.runtime.trace import AgentTokens
from lemon.spec.edits import changes_request
from lemon.spec.model import Spec
from lemon.spec.render import FieldRef
from lemon.spec.roles import RoleLibrary


def rerun_agents(spec: Spec, ref: FieldRef, edited: Spec, pool: Pool, roles: RoleLibrary,
                 ran: Collection[str]) -> list[str]:
    """The model-calling agents of `edited` whose request may differ from the original's, in spec order (an
    upper bound: one whose inputs come out the same is a cache hit). `ran` are the agents the original run ran:
    when a changed agent carries a stop rule (the rule edited, or anything upstream of it), the parents it did
    not run may run now, with their own unrun ancestors."""
    if not changes_request(spec, edited, ref, lambda level: pool.backend(level).model_id):
        return []
    changed = _edited_agents(spec, edited)
    changed |= {d for name in list(changed) for d in edited.descendants(name)}
    changed |= _unrun_behind_rules(spec, edited, changed, set(ran))
    live = required_agents(edited)
    return [a.name for a in edited.agents if a.name in changed & live and not roles[a.role].votes]


def _edited_agents(spec: Spec, edited: Spec) -> set[str]:
    """The agents of `edited` that differ from the same-named agent of `spec`, or are new: one field may be
    written once for several agents (a `copies` block), and resizing a block adds or removes agents."""
    before = {a.name: a for a in spec.agents}
    return {a.name for a in edited.agents if before.get(a.name) != a}


def rerun_tokens(agents: list[str], tokens: Mapping[str, AgentTokens]) -> int:
    """Worker tokens the re-run of `agents` will compute: each one's tokens in the original run (`tokens`); an
    agent the original never ran (a stop rule skipped it) at the mean of the model calls that ran."""
    per_agent = {a: int(t["prompt"]) + int(t["completion"]) for a, t in tokens.items()}
    calls = [n for n in per_agent.values() if n]
    mean = round(sum(calls) / len(calls)) if calls else 0
    return sum(per_agent.get(a, mean) for a in agents)


def rerun_plan(spec: Spec, ref: FieldRef, edited: Spec, pool: Pool, roles: RoleLibrary,
               tokens: Mapping[str, AgentTokens]) -> tuple[list[str], int]:
    """The agents a re-run of `edited` recomputes and its worker tokens, priced from one original run's
    per-agent `tokens` (the agents it ran are its keys)."""
    agents = rerun_agents(spec, ref, edited, pool, roles, tokens)
    return agents, rerun_tokens(agents, tokens)


def _unrun_behind_rules(spec: Spec, edited: Spec, changed: set[str], ran: set[str]) -> set[str]:
    """The agents not in `ran` that a changed voter with a stop rule (in `spec` or in `edited`: removing the
    rule changes it too) may now start in `edited`: its parents and their ancestors."""
    out: set[str] = set()
    before = {a.name: a for a in spec.agents}  # a resized `copies` block has agents the original lacks
    voters = [n for n in changed if edited.agent(n).stop is not None or getattr(before.get(n), "stop", None)]
    stack = [p for n in voters for p in edited.agent(n).depends_on]
    while stack:
        cur = stack.pop()
        if cur not in ran and cur not in out:
            out.add(cur)
            stack.extend(edited.agent(cur).depends_on)
    return out
