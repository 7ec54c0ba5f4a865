"""The trained orchestrator: the fine-tuned policy behind the same `Orchestrator` interface as the prompted one.

`path` is either a Hugging Face model directory (loaded lazily with transformers, greedy or sampled with `generate`)
or a `.gguf` file (exported with `lemon export-gguf`, run by the embedded llama.cpp backend). Both decode under the
spec grammar (`lemon.spec.grammar`: llguidance's Lark for transformers, llama.cpp's GBNF for a .gguf) unless
`grammar=False` (the `unconstrained:PATH` orchestrator): every output then parses as a spec over the pool's roles
and levels. What it writes still goes through the same validate / repair / fallback path as the prompted
orchestrator (a grammar cannot say which parents exist), with `source` saying which happened. Its requests go
through the pool's LLM cache under the policy's content identity, so an evaluation banks its specs;
`trained:CARD.json` (`policy_card`) replays them without the weights. This module does not import `lemon.train`:
inference must not need the training stack's config or optimiser code, only torch + transformers for an HF
directory.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lemon.errors import ConfigError, ModelFileError
from lemon.llm.base import Backend, ChatRequest, GenParams, Message
from lemon.llm.cache import CachedBackend, CacheOnlyBackend, SQLiteCache
from lemon.llm.hf import HFChatGenerator
from lemon.orchestrator.base import Proposal
from lemon.orchestrator.policy_backend import HFPolicyBackend, RenamedBackend
from lemon.orchestrator.policy_card import is_card, policy_identity, read_card
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
    """Writes specs with a trained policy (HF directory, .gguf, or a `policy_card` that replays one from the
    LLM cache); implements `Orchestrator`. With `cache`, every request goes through it under the policy's content
    identity, so an evaluation banks the specs; `offline` answers from the cache alone, as the pool's workers do."""

    level = None  # its own model, not one of the pool's levels

    def __init__(self, path: str | os.PathLike[str], roles: RoleLibrary, levels: Sequence[str], *,
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, temperature: float = 0.0, grammar: bool = True,
                 cache: SQLiteCache | None = None, offline: bool = False) -> None:
        self.roles = roles
        self.levels = tuple(levels)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.grammar = grammar
        self._greedy: dict[str, tuple[str, int, int]] = {}  # greedy: one spec per task whatever the seed
        self._gbnf: str | None = None
        backend = self._card_backend(Path(path).expanduser(), cache) if is_card(path) else \
            self._model_backend(resolve_policy_path(path), cache is not None, offline)
        self.backend: Backend = CachedBackend(backend, cache) if cache is not None else backend

    def _card_backend(self, card_path: Path, cache: SQLiteCache | None) -> Backend:
        card = read_card(card_path)
        if cache is None:
            raise ConfigError(f"{card_path} is a policy card: its specs replay from the LLM cache only; drop "
                              "--no-cache, or pass the policy's weights")
        self.path = card_path
        self.prompt_style = card.prompt_style
        return CacheOnlyBackend(card.model_id, what=f"the policy card {card_path.name}",
                                fix="import the bank its specs were exported to (lemon cache import BANK), or "
                                    "pass the policy's weights instead of its card")

    def _model_backend(self, path: Path, cached: bool, offline: bool) -> Backend:
        self.path = path
        self.prompt_style = read_prompt_style(path)  # the prompt it was trained on
        # The content identity costs a pass over the weights: paid only where a cache key needs it.
        model_id = policy_identity(path) if cached or offline else f"policy-file:{path}"
        if offline:
            return CacheOnlyBackend(model_id)
        if path.suffix == ".gguf":
            from lemon.llm.embedded import EmbeddedBackend

            return RenamedBackend(EmbeddedBackend(str(path)), model_id)
        return HFPolicyBackend(HFChatGenerator(path, self._constrain if self.grammar else None), model_id)

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

    def request(self, task: str, seed: int) -> ChatRequest:
        """The policy's request for `task`: the same whether it is generated, cached or replayed from a card
        (the grammar, from the pool's roles and levels, is part of its key)."""
        if self.grammar and self._gbnf is None:
            self._gbnf = policy_grammar(self.roles, self.levels).gbnf()
        messages = policy_messages(task, self.roles, self.levels, self.prompt_style)
        return ChatRequest(tuple(Message(m["role"], m["content"]) for m in messages),  # type: ignore[arg-type]
                           GenParams(temperature=self.temperature, max_tokens=self.max_new_tokens,
                                     seed=seed if self.temperature > 0 else None),
                           grammar=self._gbnf if self.grammar else None)

    async def _generate(self, task: str, seed: int) -> tuple[str, int, int]:
        c = await self.backend.complete(self.request(task, seed))
        return c.text, c.prompt_tokens, c.completion_tokens

    async def propose(self, task: str, *, seed: int = 0) -> Proposal:
        raw, prompt_tokens, completion_tokens = await self._complete(task, seed)
        spec, source, warnings = spec_from_output(raw, task, self.roles, self.levels)
        for w in warnings:
            log.info("trained orchestrator: %s", w)  # the Proposal carries it; the caller shows it once
        return Proposal(spec=spec, source=source, raw=raw, warnings=warnings,  # type: ignore[arg-type]
                        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        extra={"policy": str(self.path), "grammar": self.grammar})

    async def aclose(self) -> None:
        await self.backend.aclose()
