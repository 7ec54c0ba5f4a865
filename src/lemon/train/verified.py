"""Execution-verified SFT targets: the best of several candidate teams per task, kept only if it was right.

Why: the first SFT data were the teacher's teams, never executed: 104 of 160 had an agent that never ran,
and the policy learned one 2-agent team that scored below a single CoT agent. A policy can only imitate its
targets, so here every training task gets candidates — the teacher's proposal (if it wrote one), the default
orchestration's team and the fixed baselines at every level — and each runs through the trainer's own
rollout scoring (`rollout.score_group`: strict parse, one node cache per task, `worker_samples` worker seeds
sampled as in evaluation, the training reward). The target is the highest-reward candidate that was right
under EVERY worker seed (ties go to the cheaper team, which the reward already prefers); a task where no
candidate was always right gives no example. Baselines among the candidates keep the data diverse and make
"at least as good as the best fixed team" the floor of what the policy imitates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lemon.evaluation.bank import BANK_VOTERS, vote_team
from lemon.evaluation.baselines import GATE_LOGPROB
from lemon.runtime import Executor
from lemon.runtime.executor import required_agents
from lemon.spec.model import Spec, StopRule
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from lemon.train.config import RewardConfig
from lemon.train.rollout import RolloutSettings, score_group
from lemon.train.tasks import TrainTask

Progress = Callable[[str, int, int], None]
#: (baseline, number of agents or None for its default): a 3-voter sc-cot, as the default team has, and the
#: stop-rule vote (esc: 5 voters that stop once 2 agree), so the cheapest always-right team differs by item (one
#: agent where one suffices, a vote that stops early where it does not: issue 24) and the data teaches that.
CANDIDATE_BASELINES: tuple[tuple[str, int | None], ...] = (("vanilla", None), ("cot", None), ("sc-cot", 3),
                                                           ("esc", None), ("chain", None))


def live_spec(spec: Spec) -> Spec:
    """`spec` without the agents the runtime would never run (not ancestors of the output agent).

    A teacher that writes a critic nothing depends on teaches the policy to spend spec tokens on an agent that
    is pruned at run time (104 of 160 targets of our first diverse SFT run had one), so SFT targets keep only
    the live team. Only a spec with an explicit `output` can have dead agents (with a unique sink, every agent
    reaches it), and that `output` is kept.
    """
    needed = required_agents(spec)
    if len(needed) == len(spec.agents):
        return spec
    return Spec(agents=tuple(a for a in spec.agents if a.name in needed), output=spec.output)


def candidate_specs(kind: str, roles: RoleLibrary, levels: Sequence[str]) -> list[tuple[str, Spec]]:
    """(label, spec) of the fixed candidates: the default team, and each baseline at every level."""
    from lemon.evaluation.baselines import baseline_spec
    from lemon.orchestrator.template import team_spec

    out = [("template", team_spec(kind, roles, levels))]
    for method, n in CANDIDATE_BASELINES:
        for level in levels:
            spec = baseline_spec(method, kind, level=level, seed=0, n=n)
            out.append((f"{method}@{level}", validate_spec(spec, roles, levels)))
    return out


#: The teams a sample bank of 5 voters at one level answers exactly (`experiments/adaptive_cpu.sh`): one CoT
#: agent (the first voter), votes of 3 and 5, and stop-rule votes over them, the logprob gate among them (its
#: scores come from the LLM cache's score table, or the pool scores them). (label, voters, stop rule)
BANK_TEAMS: tuple[tuple[str, int, StopRule | None], ...] = (
    ("cot", 1, None), ("gate", 5, StopRule(agree=2, logprob=GATE_LOGPROB)), ("agree-2-of-3", 3, StopRule(agree=2)),
    ("esc", 5, StopRule(agree=2)), ("sc-cot-3", 3, None), ("confidence-0.8-of-5", 5, StopRule(confidence=0.8)),
    ("sc-cot-5", 5, None))


def bank_candidates(kind: str, roles: RoleLibrary, level: str) -> list[tuple[str, Spec]]:
    """(label, spec) of `BANK_TEAMS` at `level`, written as the policy would (voters as one `copies` block)."""
    return [(label, vote_team(kind, level, voters, rule)) for label, voters, rule in BANK_TEAMS]


#: Characters of canonical spec text per orchestrator token, when the reward does not say (SmolLM2's tokenizer
#: on our specs, as experiments/adaptive_train.yaml measures it).
SPEC_CHARS_PER_TOKEN = 3.5


def user_pays(reward: RewardConfig) -> RewardConfig:
    """`reward` whose cost is what a user pays: tokens (workers' and the spec's own), no structure cost. The
    structure cost counts WRITTEN agents and edges, so it would charge a stopping vote for voters it never
    runs (5 written, 1 run: dearer than 3 written, 2 run) and pick the team that costs more tokens."""
    return reward.model_copy(update={"agent_cost": 0.0, "edge_cost": 0.0,
                                     "spec_chars_per_token": reward.spec_chars_per_token or SPEC_CHARS_PER_TOKEN})


#: Orders of the bank's draws the bank teacher runs every candidate in (`rollout.draw_orders`): enough that a
#: team's success is close to its expected success on the item (cot's: the share of right draws).
TEACHER_ORDERS = 24


def bank_settings(reward: RewardConfig, orders: int) -> RolloutSettings:
    """How the bank teachers score a team: what a user pays (`user_pays`), over `orders` orders of the draws."""
    return RolloutSettings(reward=user_pays(reward), cf_enabled=False, worker_samples=orders,
                           permute_draws=BANK_VOTERS if orders > 1 else 0)


async def bank_targets(tasks: Sequence[TrainTask], executor: Executor, *, reward: RewardConfig,
                       orders: int = TEACHER_ORDERS, progress: Progress | None = None
                       ) -> tuple[list[tuple[TrainTask, str, Spec]], dict[str, int]]:
    """Per task, the one of `BANK_TEAMS` at the strongest level with the highest EXPECTED reward: each runs
    over `orders` orders of the task's banked draws (`TrainTask.bank_seed`), all answered by the bank. A
    task no team ever gets right gives no example.

    Why expected: the policy reads only the question, so the team to teach is the one that pays on the item's
    draws, not on the one order the bank happened to hold. Judged on that one order, 23 of the first 25
    targets were one agent, right by luck where a vote was needed; requiring one agent to be right on every
    draw fixed that but still ranked the vote teams by one order's luck."""
    level = executor.pool.level_names[-1]
    fixed: dict[str, list[tuple[str, Spec]]] = {}

    async def candidates(task: TrainTask) -> list[tuple[str, Spec]]:
        return fixed.setdefault(task.kind, bank_candidates(task.kind, executor.roles, level))

    settings = bank_settings(reward, orders)
    return await pick_targets(tasks, executor, candidates, lambda task: task.bank_seed, settings=settings,
                              always_right=False, phase="bank", progress=progress)


@dataclass(frozen=True, slots=True)
class TeamOutcome:
    """One team on one task over the teacher's draw orders: its mean reward (-1 if invalid), the share of orders
    it was right in, and its mean worker tokens."""

    reward: float
    success: float
    tokens: float


#: How a pooled teacher picks a benchmark's team: from the menu's (label, spec) teams and, per run task, the task
#: and every team's outcome on it, the index of the team to teach.
Chooser = Callable[[Sequence[tuple[str, Spec]], Sequence[tuple[TrainTask, Sequence[TeamOutcome]]]], int]
#: The teams a pooled teacher chooses among, given (answer kind, roles, level).
Menu = Callable[[str, RoleLibrary, str], list[tuple[str, Spec]]]


def best_mean_reward(teams: Sequence[tuple[str, Spec]], runs: Sequence[tuple[TrainTask, Sequence[TeamOutcome]]]
                     ) -> int:
    """The team of the highest summed reward over the run tasks (ties: the earlier, cheaper-listed team)."""
    return max(range(len(teams)), key=lambda k: (sum(r[k].reward for _, r in runs), -k))


async def pooled_bank_targets(tasks: Sequence[TrainTask], executor: Executor, *, reward: RewardConfig,
                              orders: int = TEACHER_ORDERS, progress: Progress | None = None,
                              chosen_on: int | None = None, choose: Chooser = best_mean_reward,
                              menu: Menu = bank_candidates) -> tuple[list[tuple[TrainTask, str, Spec]],
                                                                     dict[str, int]]:
    """Per benchmark, ONE team of `menu` (default `BANK_TEAMS`), picked by `choose` (default: the highest MEAN
    expected reward over the benchmark's tasks, each team over `orders` orders of every task's banked draws, as
    `bank_targets`), taught on every task it ever gets right. With `chosen_on` = K, only each benchmark's first
    K tasks (the banked ones) choose, and every later task is taught the choice unrun: no worker call, and a
    policy sees many questions of each benchmark.

    Why pooled: the per-task winner is the team to teach only if the policy can tell tasks apart. Ours cannot
    yet: taught each task's winner (33 of 53 targets one agent), it wrote one agent everywhere after GRPO,
    though on every benchmark of the mixture a stopping vote has the higher expected reward (GSM8K `train`,
    24 orders: one agent 0.60, `agree 2 of 5` 0.73). What a policy that reads only the question should write
    is the best team for the questions it cannot tell apart; the stop rule then adapts to each item at run
    time (voters run track the item's difficulty). Why `chosen_on`: taught on 20 banked tasks a benchmark,
    the policy wrote the GSM8K team for SVAMP too (docs/results.md); the choice needs the bank, the teaching
    does not."""
    if chosen_on is not None and chosen_on < 1:
        raise ValueError(f"chosen_on must be at least 1 task a benchmark, got {chosen_on}")
    level = executor.pool.level_names[-1]
    settings = bank_settings(reward, orders)
    seen: Counter[str] = Counter()
    fixed: dict[str, list[tuple[str, Spec]]] = {}
    scored: list[tuple[TrainTask, list[tuple[str, Spec]], list[TeamOutcome] | None]] = []
    for i, task in enumerate(tasks):
        teams = fixed.setdefault(task.kind, menu(task.kind, executor.roles, level))
        seen[benchmark_of(task)] += 1
        if chosen_on is not None and seen[benchmark_of(task)] > chosen_on:
            scored.append((task, teams, None))  # taught the benchmark's choice, not run
        else:
            state = await score_group(executor, task, [render_spec(s).text for _, s in teams],
                                      roles=executor.roles, settings=settings, seed=task.bank_seed)
            scored.append((task, teams, [TeamOutcome(s.total_reward if s.valid else -1.0,
                                                     s.success if s.valid else 0.0, float(s.total_tokens))
                                         for s in state.result.samples]))
        if progress is not None:
            progress("bank", i + 1, len(tasks))
    return _teach_pooled(scored, choose)


def _teach_pooled(scored: Sequence[tuple[TrainTask, list[tuple[str, Spec]], list[TeamOutcome] | None]],
                  choose: Chooser) -> tuple[list[tuple[TrainTask, str, Spec]], dict[str, int]]:
    """Per benchmark `choose`'s team over its run tasks; each run task is taught it where it is ever right,
    each unrun task (outcomes None) always."""
    best: dict[str, int] = {}
    for bench in {benchmark_of(t) for t, *_ in scored}:
        runs = [(t, teams, r) for t, teams, r in scored if benchmark_of(t) == bench and r is not None]
        best[bench] = choose(runs[0][1], [(t, r) for t, _, r in runs])
    out, won = [], Counter[str]()
    for task, teams, outcomes in scored:
        k = best[benchmark_of(task)]
        right = outcomes is None or outcomes[k].success > 0
        won[teams[k][0] if right else "none right"] += 1
        if right:
            out.append((task, teams[k][0], teams[k][1]))
    return out, dict(won)


def benchmark_of(task: TrainTask) -> str:
    """The benchmark a task id names (`gsm8k/train/3` -> `gsm8k`)."""
    return task.id.split("/", 1)[0]


async def best_candidate(executor: Executor, task: TrainTask, candidates: Sequence[tuple[str, Spec]], *,
                         settings: RolloutSettings, seed: int, always_right: bool = True
                         ) -> tuple[str, Spec] | None:
    """The highest-reward candidate that was right under every worker draw (`always_right`) or under any,
    or None."""
    texts = [render_spec(spec).text for _, spec in candidates]
    state = await score_group(executor, task, texts, roles=executor.roles, settings=settings, seed=seed)
    right = [(s.total_reward, -k, k) for k, s in enumerate(state.result.samples)
             if s.valid and (s.success == 1.0 if always_right else s.success > 0.0)]
    if not right:
        return None
    k = max(right)[2]
    return candidates[k]


async def verified_targets(tasks: Sequence[TrainTask], executor: Executor, *, reward: RewardConfig,
                           teacher: Any | None = None, worker_samples: int = 2, seed: int = 0,
                           progress: Progress | None = None) -> tuple[list[tuple[TrainTask, str, Spec]],
                                                                        dict[str, int]]:
    """(task, winning label, spec) per task that had an always-right candidate, and how often each won."""
    from lemon.seeds import stable_seed

    levels = executor.pool.level_names
    fixed: dict[str, list[tuple[str, Spec]]] = {}

    async def candidates(task: TrainTask) -> list[tuple[str, Spec]]:
        out = list(fixed.setdefault(task.kind, candidate_specs(task.kind, executor.roles, levels)))
        if teacher is not None:
            proposal = await teacher.propose(task.prompt)
            if proposal.source != "fallback":
                out.insert(0, ("teacher", live_spec(proposal.spec)))
        return out

    settings = RolloutSettings(reward=reward, cf_enabled=False, worker_samples=worker_samples)
    return await pick_targets(tasks, executor, candidates, lambda task: stable_seed(seed, "verified", task.id),
                              settings=settings, phase="verify", progress=progress)


async def pick_targets(tasks: Sequence[TrainTask], executor: Executor,
                       candidates: Callable[[TrainTask], Awaitable[list[tuple[str, Spec]]]],
                       seed_of: Callable[[TrainTask], int], *, settings: RolloutSettings, phase: str,
                       progress: Progress | None, always_right: bool = True
                       ) -> tuple[list[tuple[TrainTask, str, Spec]], dict[str, int]]:
    """Per task, `best_candidate` of its candidates under its worker seed; how often each label won."""
    won: Counter[str] = Counter()
    out = []
    for i, task in enumerate(tasks):
        best = await best_candidate(executor, task, await candidates(task), settings=settings,
                                    seed=seed_of(task), always_right=always_right)
        won[best[0] if best else "none right"] += 1
        if best is not None:
            out.append((task, best[0], best[1]))
        if progress is not None:
            progress(phase, i + 1, len(tasks))
    return out, dict(won)
