"""Training configuration: reward coefficients, credit and sampler settings, LoRA, as validated data.

The method leaves the coefficients unpublished, so they are data (``configs/default.yaml``) with the
reason for every default written next to it, not constants buried in code. Loading fails with a one-line
``ConfigError`` naming the file and the field, so a typo in a config cannot silently train with defaults.
"""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lemon.errors import ConfigError
from lemon.spec.edits import ALL_FAMILIES
from lemon.spec.model import MAX_AGENTS
from lemon.yamlfile import load_yaml

logger = logging.getLogger(__name__)

#: The single-field edit families: the method's m_E, m_R, m_L, and `level` (ours; see lemon.spec.edits).
FAMILIES: tuple[str, ...] = ALL_FAMILIES  # the registry of lemon.spec.edits: a new family file joins it
#: The families a run edits unless configured otherwise (see configs/default.yaml for why `level`).
DEFAULT_FAMILIES: tuple[str, ...] = ("edge", "role", "level")
# A DAG over MAX_AGENTS nodes has at most n(n-1)/2 edges: the worst-case structure cost uses it.
MAX_EDGES = MAX_AGENTS * (MAX_AGENTS - 1) // 2


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RewardConfig(_Strict):
    """Coefficients of r = success + efficiency bonus - structure cost (or the invalid penalty alone)."""

    success_weight: float = Field(default=1.0, ge=0.0)
    efficiency_coef: float = Field(default=0.1, ge=0.0)
    token_ref: int = Field(default=2048, gt=0)
    efficiency_requires_success: bool = True
    agent_cost: float = Field(default=0.01, ge=0.0)
    edge_cost: float = Field(default=0.005, ge=0.0)
    invalid_penalty: float = Field(default=-1.0, le=0.0)
    # What the efficiency bonus counts as cost (issue 24: what a user pays). `worker_tokens`: every agent's
    # tokens; `param_tokens`: each token weighted by its model's size in billions of parameters (the paper's
    # measure; `token_ref` is then in B-param x tokens). `spec_chars_per_token`: also count the orchestrator's
    # spec, estimated as its canonical text's length over this many characters per token (None: not counted),
    # at `orchestrator_params_b` billions of parameters under `param_tokens`.
    cost: Literal["worker_tokens", "param_tokens"] = "worker_tokens"
    spec_chars_per_token: float | None = Field(default=None, gt=0.0)
    orchestrator_params_b: float = Field(default=0.135, gt=0.0)

    def max_structure_cost(self) -> float:
        """The largest structure cost any valid spec can incur (MAX_AGENTS agents, a complete DAG)."""
        return self.agent_cost * MAX_AGENTS + self.edge_cost * MAX_EDGES

    @model_validator(mode="after")
    def _warn_on_inverted_ordering(self) -> RewardConfig:
        # Not errors: ablations may zero terms on purpose. But the person should know the ordering broke.
        margin = self.efficiency_coef + self.max_structure_cost()
        if self.success_weight > 0 and margin >= self.success_weight:
            logger.warning("reward: efficiency bonus + worst structure cost (%.3f) >= success weight (%.3f); "
                           "a cheap wrong spec can outscore a correct one", margin, self.success_weight)
        if self.invalid_penalty >= -self.max_structure_cost():
            logger.warning("reward: invalid penalty %.3f is not below the worst valid reward %.3f; "
                           "the policy can prefer invalid specs", self.invalid_penalty,
                           -self.max_structure_cost())
        return self


class CreditConfig(_Strict):
    """Weights of the loss terms (counterfactual lambda, KL to the reference, PPO clip) and the CF budget."""

    cf_weight: float = Field(default=1.0, ge=0.0)
    kl_beta: float = Field(default=0.04, ge=0.0)
    clip_eps: float = Field(default=0.2, gt=0.0)
    # Extra worker tokens counterfactual re-runs may add to a group, as a fraction of the group's rollout
    # tokens (estimated before each re-run); None = a counterfactual for every valid spec, whatever it costs.
    cf_budget: float | None = Field(default=0.2, ge=0.0)
    # Divisor of group advantages and counterfactual deltas alike (credit.advantage_scales).
    advantage_scale: Literal["none", "batch_std", "group_std"] = "none"
    advantage_floor: float = Field(default=0.1, gt=0.0)
    # Standard units of advantage a group whose samples all succeed alike gets for its cost contrast
    # (credit.tied_cost_advantages); 0 keeps it in reward units, where the signal floor skips it.
    tied_cost: float = Field(default=0.0, ge=0.0)
    # How Δ reaches the policy (credit.py): "span" = weight * Δ on the original field's tokens; "pairwise" =
    # a preference between the written and the edited value at the first token where they differ.
    cf_form: Literal["span", "pairwise"] = "span"


class RolloutConfig(_Strict):
    """How specs are sampled from the policy and executed."""

    tasks_per_step: int = Field(default=4, ge=1)
    max_new_tokens: int = Field(default=256, ge=8)
    temperature: float = Field(default=1.0, gt=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    worker_budget_tokens: int | None = Field(default=None, gt=0)
    # Sample under the spec grammar (`lemon.spec.grammar`): every spec parses; the loss scores the masked,
    # renormalised distribution the specs were drawn from. `--set rollout.grammar=false` samples freely.
    grammar: bool = True

    @model_validator(mode="after")
    def _full_support(self) -> RolloutConfig:
        # The loss scores softmax(logits / T) over the whole vocabulary; nucleus truncation would make the
        # sampled distribution differ from the scored one, and the gradient would be biased.
        if self.top_p != 1.0:
            raise ValueError("top_p must be 1.0 for training: the loss scores the untruncated distribution")
        return self


class WorkerConfig(_Strict):
    """How the WORKERS run during training: the same distribution evaluation uses (review item 3).

    Evaluation samples workers at temperature 0.7 with a seed per (item, seed); a trainer that sees greedy
    workers cannot value voting or redundancy. `samples` > 1 runs each spec under that many worker seeds and
    uses the mean success, a lower-variance reward at `samples` times the execution cost.
    """

    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, gt=0)
    samples: int = Field(default=1, ge=1, le=16)
    # Where a group's worker seeds come from: `step` = (run seed, task id, step), fresh draws every visit;
    # `task` = (run seed, task id) only, the same every time the task comes back (common random numbers: a
    # team the policy writes again is a request-cache hit, and both ablation arms see the same draws).
    # `bank` = the seed `lemon eval --seeds 1` gives the item: every vote or stop-rule team over the voters a
    # sample bank holds (experiments/adaptive_cpu.sh train-bank) is answered from the LLM cache, exactly.
    seeds: Literal["task", "step", "bank"] = "step"
    # Draws of each role the sample bank holds (`lemon.evaluation.bank.BANK_VOTERS`, not imported: config stays
    # light). With `seeds: bank`,
    # `samples` > 1 re-runs each spec with these draws in other orders, not under fresh seeds: a team's
    # success becomes nearly its EXPECTED success on the item (cot: the share of right draws), at no worker
    # call, where one draw order says only whether its first voter was lucky.
    bank_draws: int = Field(default=5, ge=1, le=64)

    def permute_draws(self) -> int:
        """`RolloutSettings.permute_draws` for this config: the bank's width where samples are orders."""
        return self.bank_draws if self.seeds == "bank" and self.samples > 1 else 0


class OptimConfig(_Strict):
    """AdamW settings of the policy update (`epochs` optimiser steps per batch of groups)."""

    lr: float = Field(default=1e-5, ge=0.0)  # 0 switches learning off (tests)
    weight_decay: float = Field(default=0.0, ge=0.0)
    max_grad_norm: float = Field(default=1.0, gt=0.0)
    # A batch whose gradient norm (before clipping) is below this takes no step. Adam normalises each step by
    # its running gradient scale, so a run of near-zero gradients (a counterfactual Δ on a span the policy
    # already writes with p ~ 1: 5e-5 on SmolLM2 + LoRA) still moved the weights a full step each time, and
    # an arm with more such batches took more optimiser steps than its comparison (issue 24's r8 runs).
    min_grad_norm: float = Field(default=1e-3, ge=0.0)
    # Nor does a batch whose reward terms cannot move the logits: sum over completion tokens of |w| (1 - p),
    # w the group advantage plus counterfactual weight (pairwise: |w Δ| sigmoid(-margin)), per token, below
    # this (credit.reward_room). Unlike the gradient norm it does not depend on the parameters behind the logits.
    min_signal: float = Field(default=1e-4, ge=0.0)
    micro_batch: int = Field(default=4, ge=1)
    # Optimiser steps on each batch; > 1 scores later epochs against the sampling policy's log-probs with
    # PPO's clipped ratio (credit.clip_eps). 1 = plain GRPO, the ratio is 1 and clipping inactive.
    epochs: int = Field(default=1, ge=1, le=16)
    # auto = bf16 autocast on a GPU (fp32 master weights; a LoRA base is loaded in bf16), fp32 on the CPU.
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # Recompute activations in the backward pass: less memory for long completions and large policies.
    gradient_checkpointing: bool = False
    # Score a group's shared prompt once and its completions from the prompt's key/value cache (same numbers,
    # P + G*T instead of G*(P + T) tokens). Off under gradient checkpointing (transformers drops the cache).
    share_prompt: bool = True


class GroupConfig(_Strict):
    """GRPO grouping."""

    group_size: int = Field(default=4, ge=2)


class SamplerConfig(_Strict):
    """Adaptive choice of the edit family for counterfactuals."""

    families: tuple[str, ...] = DEFAULT_FAMILIES
    floor: float = Field(default=0.1, ge=0.0)
    window: int = Field(default=64, ge=1)
    confidence_discount: bool = False

    @model_validator(mode="after")
    def _check_floor(self) -> SamplerConfig:
        if not self.families or len(set(self.families)) != len(self.families):
            raise ValueError("families must be non-empty and unique")
        unknown = set(self.families) - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown families {sorted(unknown)}; known: {list(FAMILIES)}")
        if self.floor * len(self.families) > 1.0:
            raise ValueError(f"floor {self.floor} x {len(self.families)} families exceeds 1")
        return self


class LoraSettings(_Strict):
    """peft LoRA adapter settings (used for models too large to fine-tune fully on the CPU)."""

    r: int = Field(default=16, ge=1)
    alpha: int = Field(default=32, ge=1)
    dropout: float = Field(default=0.05, ge=0.0, lt=1.0)
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


class TrainConfig(_Strict):
    """Everything ``configs/default.yaml`` holds."""

    reward: RewardConfig = RewardConfig()
    credit: CreditConfig = CreditConfig()
    group: GroupConfig = GroupConfig()
    sampler: SamplerConfig = SamplerConfig()
    lora: LoraSettings = LoraSettings()
    rollout: RolloutConfig = RolloutConfig()
    workers: WorkerConfig = WorkerConfig()
    optim: OptimConfig = OptimConfig()


def default_config_text() -> str:
    """The packaged default YAML (with its comments)."""
    return resources.files("lemon.train").joinpath("configs/default.yaml").read_text(encoding="utf-8")


def load_train_config(path: str | Path | None = None) -> TrainConfig:
    """Load and validate a training config; None = the packaged default. Raises ConfigError."""
    where = str(path) if path is not None else "lemon/train/configs/default.yaml"
    try:
        text = Path(path).read_text(encoding="utf-8") if path is not None else default_config_text()
    except OSError as exc:
        raise ConfigError(f"cannot read training config {where}: {exc.strerror or exc}") from exc
    try:
        data: Any = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"training config {where} is not valid YAML: {str(exc).splitlines()[0]}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"training config {where} must be a mapping at the top level")
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ConfigError(f"training config {where}: {loc}: {err['msg']}") from exc


def load_reward_config(path: str | Path | None = None) -> RewardConfig:
    """The ``reward`` section of a training config (None = packaged default)."""
    return load_train_config(path).reward
