"""The trained orchestrator: the fine-tuned policy behind the same `Orchestrator` interface as the prompted one.

`path` is either a Hugging Face model directory (loaded lazily with transformers, greedy or sampled with
`generate`) or a `.gguf` file (exported with `lemon export-gguf`, run by the embedded llama.cpp backend).
Both decode under the spec grammar (`lemon.spec.grammar`: llguidance's Lark for transformers, llama.cpp's GBNF
for a .gguf) unless `grammar=False` (the `unconstrained:PATH` orchestrator): every output then parses as a spec
over the pool's roles and levels. What it writes still goes through the same validate / repair / fallback
path as the prompted orchestrator (a grammar cannot say which parents exist), with `source` saying which
happened. This module does not import `lemon.train`: inference must not need the training stack's
config or optimiser code, only torch + transformers for an HF directory.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lemon.errors import ModelFileError
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.hf import HFChatGenerator
from lemon.orchestrator.base import Proposal
from lemon.orchestrator.policy_prompt import policy_messages, read_prompt_style
from lemon.orchestrator.repair import spec_from_output
from lemon.runtime.budget import prompt_token_bound
from lemon.spec.grammar import policy_grammar
from lemon.spec.roles import RoleLibrary

log = logging.getLogger(__name__)

# The completion budget the policy was trained with (train config rollout.max_new_tokens and SFT's): at
# inference a different budget cuts or extends specs the policy never learned to write or stop.
DEFAULT_MAX_NEW_TOKENS = 256


def resolve_policy_path(path: str | os.PathLike[str]) -> Path:
    """A model directory, a .gguf file, or a training run directory (its `final/` model)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(f"trained orchestrator {p} does not exist; pass the output of lemon sft / "
                             "lemon train (a model directory or run directory) or a .gguf file")
    if p.is_dir() and not (p / "config.json").is_file() and (p / "final" / "config.json").is_file():
        return p / "final"
    if p.suffix == ".gguf":
        if not p.is_file():
            raise ModelFileError(f"trained orchestrator {p} does not exist; export one with lemon export-gguf")
        return p
    if not (p / "config.json").is_file():
        raise ModelFileError(f"trained orchestrator {p} is not a model directory (no config.json); pass the "
                             "output of lemon sft / lemon train or a .gguf file")
    return p


class TrainedOrchestrator:
    """Writes specs with a trained policy (HF directory or .gguf); implements `Orchestrator`."""

    level = None  # its own model, not one of the pool's levels

    def __init__(self, path: str | os.PathLike[str], roles: RoleLibrary, levels: Sequence[str], *,
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, temperature: float = 0.0, grammar: bool = True) -> None:
        self.path = resolve_policy_path(path)
        self.roles = roles
        self.levels = tuple(levels)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.grammar = grammar
        self.prompt_style = read_prompt_style(self.path)  # the prompt it was trained on
        self._gguf: Any = None
        self._hf: HFChatGenerator | None = None
        # Greedy decoding writes one spec per task whatever the seed: an evaluation over several seeds asks
        # for the same task again, and the HF path has no request cache, so the first answer is kept.
        self._greedy: dict[str, tuple[str, int, int]] = {}
        if self.path.suffix == ".gguf":
            from lemon.llm.embedded import EmbeddedBackend

            self._gguf = EmbeddedBackend(str(self.path))
        else:
            self._hf = HFChatGenerator(self.path, self._constrain if grammar else None)

    def _constrain(self, model: Any, tokenizer: Any) -> Any:
        from lemon.llm.constrained import spec_decoding

        return spec_decoding(model, tokenizer, self.roles, self.levels)

    def token_bound(self, task: str) -> int:
        """A bound on the prompt's tokens plus the generation limit."""
        messages = policy_messages(task, self.roles, self.levels, self.prompt_style)
        return (prompt_token_bound([Message(m["role"], m["content"]) for m in messages])  # type: ignore[arg-type]
                + self.max_new_tokens)

    async def _complete(self, task: str, seed: int) -> tuple[str, int, int]:
        if self.temperature > 0:
            return await self._generate(task, seed)
        if task not in self._greedy:
            self._greedy[task] = await self._generate(task, seed)
        return self._greedy[task]

    async def _generate(self, task: str, seed: int) -> tuple[str, int, int]:
        messages = policy_messages(task, self.roles, self.levels, self.prompt_style)
        if self._gguf is not None:
            req = ChatRequest(tuple(Message(m["role"], m["content"]) for m in messages),  # type: ignore[arg-type]
                              GenParams(temperature=self.temperature, max_tokens=self.max_new_tokens,
                                        seed=seed if self.temperature > 0 else None),
                              grammar=policy_grammar(self.roles, self.levels).gbnf() if self.grammar else None)
            c = await self._gguf.complete(req)
            return c.text, c.prompt_tokens, c.completion_tokens
        assert self._hf is not None
        return await asyncio.to_thread(self._hf.generate, messages, self.max_new_tokens, self.temperature, seed)

    async def propose(self, task: str, *, seed: int = 0) -> Proposal:
        raw, prompt_tokens, completion_tokens = await self._complete(task, seed)
        spec, source, warnings = spec_from_output(raw, task, self.roles, self.levels)
        for w in warnings:
            log.info("trained orchestrator: %s", w)  # the Proposal carries it; the caller shows it once
        return Proposal(spec=spec, source=source, raw=raw, warnings=warnings,  # type: ignore[arg-type]
                        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        extra={"policy": str(self.path), "grammar": self.grammar})

    async def aclose(self) -> None:
        if self._gguf is not None:
            await self._gguf.aclose()
