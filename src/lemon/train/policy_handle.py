"""What the trainer needs of a policy, as one small protocol, and its Hugging Face implementation.

The trainer samples completions, scores them teacher-forced (`generation.batch_logprobs` calls the module's
forward), and saves checkpoints; nothing else. Keeping that behind `PolicyHandle` lets the learning-dynamics
tests and `benchmarks/bench_learning.py` drive the REAL trainer (batching, credit, loss, optimiser) with a
small simulated policy (`lemon.train.simulate.SlotPolicy`), and lets the KL reference of a LoRA policy be the
same model with its adapter switched off instead of a second full copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from lemon.llm.constrained import SpecDecoding
from lemon.orchestrator.policy_prompt import write_prompt_style
from lemon.train.generation import Completion, chat_prompt_ids, generate, score_completions
from lemon.train.token_spans import first_divergence


class PolicyHandle(Protocol):
    model: Any          # a torch module whose forward `batch_logprobs` can call

    @property
    def pad_id(self) -> int: ...

    @property
    def prompt_style(self) -> str:
        """The policy prompt it is asked with (`policy_prompt.PROMPT_STYLES`)."""
        ...

    @property
    def decoding(self) -> SpecDecoding | None:
        """The spec grammar it samples under (None: free decoding)."""
        ...

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]: ...

    def sample(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float,
               seed: int) -> list[Completion]: ...

    def save(self, target: Path, state: dict[str, torch.Tensor] | None = None) -> None:
        """Write the policy to `target`; `state`: its weights gathered from FSDP shards (None: the module's)."""
        ...

    def alternative(self, completion: Completion, start: int, end: int, replacement: str) -> tuple[int, int] | None:
        """(position, token id) where `completion` with text[start:end] replaced first differs from it."""
        ...


@dataclass
class HFPolicy:
    """An HF causal LM and its tokenizer (full fine-tune, or with a peft LoRA adapter)."""

    model: Any
    tokenizer: Any
    synced_gpus: bool = False  # FSDP: every process steps generation until all are done (sharded forwards)
    prompt_style: str = "full"  # recorded beside every save, so inference asks it the same way
    decoding: SpecDecoding | None = None  # sample under the spec grammar (`rollout.grammar`); the loss replays it

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return chat_prompt_ids(self.tokenizer, messages)

    def sample(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float,
               seed: int) -> list[Completion]:
        return generate(self.model, self.tokenizer, prompts, max_new_tokens=max_new_tokens,
                        temperature=temperature, seed=seed, batch_size=max(8, min(len(prompts), 32)),
                        synced_gpus=self.synced_gpus, share_prompt=True, decoding=self.decoding)

    def alternative(self, completion: Completion, start: int, end: int, replacement: str) -> tuple[int, int] | None:
        def tokenize(text: str) -> list[int]:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

        return first_divergence(completion.ids, completion.offsets, completion.text, start, end, replacement,
                                tokenize)

    def save(self, target: Path, state: dict[str, torch.Tensor] | None = None) -> None:
        """A peft model writes only its adapter (picked out of `state` when given)."""
        extra = {} if state is None else {"state_dict": state}
        self.model.save_pretrained(str(target), safe_serialization=True, **extra)
        self.tokenizer.save_pretrained(str(target))
        write_prompt_style(target, self.prompt_style)


class Reference:
    """Log-probs of the frozen reference policy for the KL term.

    With LoRA the reference is the base model, i.e. the SAME module with its adapter disabled (no second
    copy in memory); for a full fine-tune it is a frozen copy loaded once.
    """

    def __init__(self, policy_model: Any, frozen: Any | None) -> None:
        self.policy_model = policy_model
        self.frozen = frozen
        if frozen is None and not hasattr(policy_model, "disable_adapter"):
            raise ValueError("a reference needs a frozen model, or a peft model whose adapter can be disabled")

    @torch.no_grad()
    def logprobs(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
                 temperature: float, share: bool = False, masks: torch.Tensor | None = None) -> torch.Tensor:
        """`share`: rows with one prompt run it once (`generation.score_completions`); `masks`: the grammar's,
        so the KL compares the two policies on the distribution the completions were sampled from."""
        if self.frozen is not None:
            return score_completions(self.frozen, prompts, completions, pad_id, temperature, share, masks=masks)[0]
        with self.policy_model.disable_adapter():
            return score_completions(self.policy_model, prompts, completions, pad_id, temperature, share,
                                     masks=masks)[0]
