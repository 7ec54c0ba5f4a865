"""The budgeted SFT teacher: per benchmark, the most accurate banked team that costs at most a share of the
5-vote's tokens, the policy's own orchestration tokens counted.

Why: issue 24's bar is "within 3 points of the 5-vote at <= 50 % of its tokens", and the reward-pooled teacher
(`verified.pooled_bank_targets`'s default) does not aim at it: it chose `esc` for GSM8K, 62 % of the vote's
tokens before the policy's own. This teacher applies the bar's own rule on the `train` bank, and its menu adds
the logprob gate at every threshold `experiments/stop_rules_table.py` measures, since on `train` the team that
fits under the half is a gate whose threshold differs by benchmark (on the first 20 items with a terse policy's
tokens counted: GSM8K -50, SVAMP -30, MultiArith -25): a field whose right value depends on the task, which is
what counterfactual credit needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from lemon.evaluation.bank import vote_team
from lemon.evaluation.baselines import GATE_LOGPROB, program_role, voter_team
from lemon.spec.model import Spec, StopRule
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.tasks import TrainTask
from lemon.train.verified import SPEC_CHARS_PER_TOKEN, TeamOutcome, bank_candidates

#: Logprob thresholds (nats over a reply) of the gates on the menu besides `GATE_LOGPROB`'s (together: the gates
#: `experiments/stop_rules_table.py` measures).
GATE_MENU = (-15, -20, -25, -35, -40, -50)
#: The bar's share of the 5-vote's tokens (issue 24).
BUDGET_SHARE = 0.5
#: The 5-vote's label in `verified.BANK_TEAMS`: the reference cost (its worker tokens; it has no orchestrator).
REFERENCE_TEAM = "sc-cot-5"
#: Characters of task text per SmolLM2 token (GSM8K, SVAMP, MultiArith `train`: 3.80-3.87), and each policy
#: prompt style's framing tokens around the task (`policy_prompt.PROMPT_STYLES`): what the policy reads, counted.
TASK_CHARS_PER_TOKEN = 3.85
FRAMING_TOKENS = {"terse": 22, "full": 179}


def budget_candidates(kind: str, roles: RoleLibrary, level: str) -> list[tuple[str, Spec]]:
    """`verified.bank_candidates` and the gate at each `GATE_MENU` threshold (`gate-35`, ...): all answered by
    the bank (the gate's scores from the LLM cache's score table)."""
    gates = [(f"gate{t}", vote_team(kind, level, 5, StopRule(agree=2, logprob=t)))
             for t in GATE_MENU if t != GATE_LOGPROB]
    return bank_candidates(kind, roles, level) + gates


#: The teams with program voters the `bank-budget-programs` teacher adds to the menu, as written orders of
#: program (P) and CoT (C) voters that stop once 2 agree (`evaluation.baselines.voter_team`): one program agent
#: (`pot`), program voters (`pot-esc`), two programs then prose (`mixed-esc`), and one program before or after
#: the first prose voter. Number benchmarks only; banked by `experiments/adaptive_cpu.sh program-bank`.
PROGRAM_TEAMS = ("P", "PPPPP", "PPCCC", "PCCCC", "CPCCC")


def program_candidates(kind: str, roles: RoleLibrary, level: str) -> list[tuple[str, Spec]]:
    """`budget_candidates` and `PROGRAM_TEAMS` at `level` where the answer kind has program voters."""
    programs = [(order, voter_team(kind, level, order)) for order in PROGRAM_TEAMS] if program_role(kind) else []
    return budget_candidates(kind, roles, level) + programs


def orchestration_tokens(task: TrainTask, spec: Spec, framing_tokens: float = FRAMING_TOKENS["terse"]) -> float:
    """What the policy spends on `task` writing `spec`: the prompt it reads and the canonical spec it writes."""
    return prompt_tokens(task, framing_tokens) + spec_tokens(spec)


def prompt_tokens(task: TrainTask, framing_tokens: float) -> float:
    """The policy's prompt on `task`: the task's text and the prompt style's framing."""
    return len(task.prompt) / TASK_CHARS_PER_TOKEN + framing_tokens


def spec_tokens(spec: Spec) -> float:
    """The canonical spec the policy writes."""
    return len(render_spec(spec).text) / SPEC_CHARS_PER_TOKEN


def most_accurate_within(teams: Sequence[tuple[str, Spec]], runs: Sequence[tuple[TrainTask, Sequence[TeamOutcome]]],
                         *, share: float = BUDGET_SHARE, framing_tokens: float = FRAMING_TOKENS["terse"]) -> int:
    """A `verified.Chooser`: the most accurate team (mean success over the run tasks) whose mean cost, worker
    tokens plus `orchestration_tokens`, is at most `share` of `REFERENCE_TEAM`'s mean worker tokens; ties go to
    the cheaper. With none under the budget, the cheapest team, the nearest to the bar's cost."""
    labels = [label for label, _ in teams]
    reference = sum(r[labels.index(REFERENCE_TEAM)].tokens for _, r in runs) / len(runs)
    prompt = sum(prompt_tokens(t, framing_tokens) for t, _ in runs) / len(runs)  # the same for every team
    cost = [sum(r[k].tokens for _, r in runs) / len(runs) + prompt + spec_tokens(spec)
            for k, (_, spec) in enumerate(teams)]
    accuracy = [sum(r[k].success for _, r in runs) / len(runs) for k in range(len(teams))]
    fits = [k for k in range(len(teams)) if cost[k] <= share * reference]
    if not fits:
        return min(range(len(teams)), key=lambda k: cost[k])
    return max(fits, key=lambda k: (accuracy[k], -cost[k]))
