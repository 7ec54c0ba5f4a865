"""A simulated orchestration environment for learning-dynamics tests and `benchmarks/bench_learning.py`.

SIMULATED, NOT A LEMON RESULT. Two named test doubles let the REAL trainer (`grpo.Trainer`: rollout phases,
credit, loss, optimiser) run thousands of steps in seconds:

- `SimulatedWorker`, a worker backend whose answer is right with a probability set by its capacity level
  (calibrated per level, e.g. from measured single-agent CoT success of the real pool), raised when a parent
  agent's note already holds the right answer (a checker that reads a correct solver verifies it; one that
  reads a wrong solver is on its own). Draws are seeded by the request, so re-runs through the node cache
  and counterfactual re-runs see the same outcome for the same request.
- `SlotPolicy`, a factorised policy over the fields of one two-agent spec template (solver and checker:
  duties, capacities, the checker's edge, the output). Its completion is the canonical spec text made of
  fixed chunks and one token per field choice, so span credit, offsets and log-probs work exactly as on an
  LLM policy. The best team puts both agents on the strongest level with the checker reading the solver
  as output; a spec whose output is the solver leaves the checker dead (pruned), as the SFT policy once did.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from lemon.llm.base import ChatRequest, GenParams, request_key
from lemon.llm.base import Completion as LLMCompletion
from lemon.llm.pool import Level, Pool
from lemon.seeds import stable_seed
from lemon.train.generation import Completion
from lemon.train.tasks import TrainTask

QUESTION = re.compile(r"add (\d+) and (\d+)")
ANSWER = re.compile(r"The answer is (-?\d+)")

#: Single-agent success per level. `medium` is the cpu pool's measured CoT accuracy on MultiArith test
#: (docs/results.md, 46.7-55 %); `small` (SmolLM2-135M) and `large` (Qwen2.5-1.5B) are assumptions.
CALIBRATED_SUCCESS: dict[str, float] = {"small": 0.05, "medium": 0.5, "large": 0.65}
CHECK_HELP = 0.6  # P(right | a parent's note is right) = p + (1 - p) * CHECK_HELP


class SimulatedWorker:
    """Test double of a worker backend: right with probability p (higher after a right parent note)."""

    def __init__(self, level: str, p_success: float, help_from_parent: float = CHECK_HELP) -> None:
        self.level, self.p, self.help = level, p_success, help_from_parent

    @property
    def model_id(self) -> str:
        return f"simulated-{self.level}"

    async def prepare(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def complete(self, request: ChatRequest) -> LLMCompletion:
        user = request.messages[-1].content
        a, b = (int(x) for x in QUESTION.search(user).groups())  # type: ignore[union-attr]
        gold = a + b
        notes = user.split("Notes from other agents of your team:", 1)
        parent_right = len(notes) > 1 and f"The answer is {gold}." in notes[1]
        p = self.p + (1 - self.p) * self.help if parent_right else self.p
        draw = random.Random(request_key(self.model_id, request)).random()
        answer = gold if draw < p else gold + 1
        return LLMCompletion(f"The answer is {answer}.", prompt_tokens=len(user) // 4, completion_tokens=8,
                             latency_s=0.0, model=self.model_id)


def simulated_pool(success: Mapping[str, float] = CALIBRATED_SUCCESS) -> Pool:
    """A pool of three simulated levels, weakest first."""
    levels = tuple(Level(name, SimulatedWorker(name, p), concurrency=8) for name, p in success.items())
    return Pool("simulated", levels, GenParams(temperature=0.7, max_tokens=64))


def simulated_tasks(n: int, seed: int = 0) -> list[TrainTask]:
    """`n` addition tasks; graded by the number after 'The answer is'."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)

        def grade(text: str, gold: int = a + b) -> bool:
            m = ANSWER.search(text)
            return m is not None and int(m.group(1)) == gold

        tasks.append(TrainTask(id=f"sim-{i}", prompt=f"Task {i}: add {a} and {b}.", grade=grade))
    return tasks


#: A duty and an edge are written lines or nothing: the canonical text leaves defaults (no duty, no parents)
#: out, so each slot chooses the whole line, and an edit's rewrite window (the line) is exactly one token.
DUTY_LINES = ("", '    duty: "Solve step by step."\n')
EDGE_LINES = ("", "    depends_on: [solver]\n")
LEVELS = ("small", "medium", "large")
#: The template: fixed chunks (str) and field slots (name, choices), in canonical-rendering order.
TEMPLATE: tuple[str | tuple[str, tuple[str, ...]], ...] = (
    "agents:\n  - name: solver\n    role: math_solver\n", ("solver_duty", DUTY_LINES),
    "    capacity: ", ("solver_capacity", LEVELS),
    "\n  - name: checker\n    role: critic\n", ("checker_duty", DUTY_LINES),
    "    capacity: ", ("checker_capacity", LEVELS),
    "\n", ("checker_edge", EDGE_LINES),
    "output: ", ("output", ("checker", "solver")),
    "\n",
)


class _SlotLM(torch.nn.Module):
    """Position-indexed logits over a small vocabulary: row k scores completion token k (disallowed: -1e9).

    Only the forward `generation.batch_logprobs` makes is supported: the last `logits_to_keep` rows, of which
    row k (k < T) predicts completion token k, whatever the prompt (the policy is not conditioned on it).
    """

    mask: torch.Tensor  # a registered buffer (moves with the module): declared so its type is known

    def __init__(self, allowed: Sequence[Sequence[int]], vocab: int) -> None:
        super().__init__()
        self.theta = torch.nn.Parameter(torch.zeros(len(allowed), vocab))
        mask = torch.full((len(allowed), vocab), -1e9)
        for k, ids in enumerate(allowed):
            mask[k, list(ids)] = 0.0
        self.register_buffer("mask", mask)

    def slot_logits(self) -> torch.Tensor:
        return self.theta + self.mask

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None, position_ids: Any = None,
                logits_to_keep: int = 0) -> SimpleNamespace:
        keep = logits_to_keep or self.theta.shape[0] + 1
        rows = self.slot_logits()[: keep - 1]
        pad = torch.zeros(keep - rows.shape[0], rows.shape[1], dtype=rows.dtype)
        logits = torch.cat([rows, pad])[None].expand(input_ids.shape[0], -1, -1)
        return SimpleNamespace(logits=logits)


@dataclass
class SlotPolicy:
    """Test double of the orchestrator policy (implements `policy_handle.PolicyHandle`)."""

    model: _SlotLM
    vocab: list[str]
    slot_names: list[str | None]
    pad_id: int = 0
    prompt_style: str = "full"
    decoding: None = None  # its template is its grammar: nothing else to constrain

    @classmethod
    def create(cls) -> SlotPolicy:
        vocab: list[str] = []
        allowed: list[list[int]] = []
        names: list[str | None] = []

        def tok(text: str) -> int:
            if text not in vocab:
                vocab.append(text)
            return vocab.index(text)

        for part in TEMPLATE:
            if isinstance(part, str):
                allowed.append([tok(part)])
                names.append(None)
            else:
                allowed.append([tok(c) for c in part[1]])
                names.append(part[0])
        return cls(_SlotLM(allowed, len(vocab)), vocab, names)

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return [self.pad_id]

    def sample(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float,
               seed: int) -> list[Completion]:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            probs = torch.softmax(self.model.slot_logits() / temperature, dim=-1)
        out = []
        for prompt in prompts:
            ids = [int(torch.multinomial(row, 1, generator=gen)) for row in probs]
            pieces = [self.vocab[i] for i in ids]
            starts = [sum(len(p) for p in pieces[:k]) for k in range(len(pieces))]
            offsets = [(s, s + len(p)) for s, p in zip(starts, pieces, strict=True)]
            out.append(Completion(list(prompt), ids, "".join(pieces), offsets, stopped=True))
        return out

    def alternative(self, completion: Completion, start: int, end: int, replacement: str) -> tuple[int, int] | None:
        """One token per field: the edit writes `replacement`'s token at the field's position."""
        k = next((i for i, (a, b) in enumerate(completion.offsets) if a == start and b > a), None)
        if k is None or replacement not in self.vocab or completion.text[start:end] == replacement:
            return None
        return k, self.vocab.index(replacement)

    def choice_probs(self) -> dict[str, dict[str, float]]:
        """The policy's distribution per field (what the benchmark reports)."""
        with torch.no_grad():
            probs = torch.softmax(self.model.slot_logits(), dim=-1)
        return {name: {self.vocab[i]: float(probs[k, i]) for i in range(len(self.vocab)) if probs[k, i] > 1e-6}
                for k, name in enumerate(self.slot_names) if name is not None}

    def save(self, target: Path, state: dict[str, torch.Tensor] | None = None) -> None:
        target.mkdir(parents=True, exist_ok=True)
        torch.save(self.model.state_dict() if state is None else state, target / "slot_policy.pt")




def spec_success(choice: Mapping[str, str], success: Mapping[str, float] = CALIBRATED_SUCCESS,
                 help_from_parent: float = CHECK_HELP) -> float:
    """Exact probability that the simulated team of `choice` (one value per slot) answers right."""
    p1, p2 = success[choice["solver_capacity"]], success[choice["checker_capacity"]]
    if choice["output"] == "solver":
        return p1
    if not choice["checker_edge"]:  # the checker does not read the solver
        return p2
    return p1 * (p2 + (1 - p2) * help_from_parent) + (1 - p1) * p2


def expected_success(policy: SlotPolicy, success: Mapping[str, float] = CALIBRATED_SUCCESS) -> float:
    """E over the policy's teams of `spec_success`: a noise-free learning curve (duties do not matter here)."""
    probs = policy.choice_probs()
    total = 0.0
    for c1, q1 in probs["solver_capacity"].items():
        for c2, q2 in probs["checker_capacity"].items():
            for edge, qe in probs["checker_edge"].items():
                for out, qo in probs["output"].items():
                    choice = {"solver_capacity": c1, "checker_capacity": c2, "checker_edge": edge, "output": out}
                    total += q1 * q2 * qe * qo * spec_success(choice, success)
    return total


def best_success(success: Mapping[str, float] = CALIBRATED_SUCCESS) -> float:
    """The success of the best team the template can express."""
    return max(spec_success({"solver_capacity": c1, "checker_capacity": c2, "checker_edge": e, "output": o},
                            success)
               for c1 in success for c2 in success for e in EDGE_LINES for o in ("checker", "solver"))


def simulated_trainer(*, seed: int, cf: bool, lr: float = 0.05, tasks_per_step: int = 4, group_size: int = 4,
                      n_tasks: int = 32, cf_budget: float | None = 0.2,
                      families: Sequence[str] | None = None, confidence_discount: bool = False,
                      cf_form: str = "span", success: Mapping[str, float] = CALIBRATED_SUCCESS) -> Any:
    """The real `grpo.Trainer` on the simulated pool and the slot policy (no run directory, no KL)."""
    from lemon.spec.roles import RoleLibrary
    from lemon.train.config import TrainConfig
    from lemon.train.grpo import Trainer
    from lemon.train.sampler import AdaptiveFamilySampler
    from lemon.train.settings import TrainSettings
    from lemon.train.workers import worker_executor

    sampler_cfg: dict[str, object] = {"confidence_discount": confidence_discount}
    if families is not None:
        sampler_cfg["families"] = tuple(families)
    cfg = TrainConfig.model_validate({
        "sampler": sampler_cfg,
        "credit": {"kl_beta": 0.0, "cf_budget": cf_budget, "cf_form": cf_form},
        "group": {"group_size": group_size},
        "rollout": {"tasks_per_step": tasks_per_step, "temperature": 1.0},
        "optim": {"lr": lr, "micro_batch": 64},
    })
    policy = SlotPolicy.create()
    roles = RoleLibrary.load()
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=lr)
    sampler = AdaptiveFamilySampler.from_config(cfg.sampler, seed=stable_seed(seed, "sampler"))
    settings = TrainSettings(run_dir=Path("simulated"), seed=seed, cf=cf)
    return Trainer(settings, cfg, policy, worker_executor(simulated_pool(success), roles, cfg), roles,
                   simulated_tasks(n_tasks, seed), optimizer, sampler)
