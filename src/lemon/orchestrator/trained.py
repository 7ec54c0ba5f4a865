"""The trained orchestrator: the fine-tuned policy behind the same `Orchestrator` interface as the prompted one.

`path` is either a Hugging Face model directory (loaded lazily with transformers, greedy or sampled with
`generate`) or a `.gguf` file (exported with `lemon export-gguf`, run by the embedded llama.cpp backend).
No grammar in either case: the policy was trained to write the canonical YAML unaided, and what it writes
goes through the same validate / repair / fallback path as the prompted orchestrator, with `source` saying
which happened. This module does not import `lemon.train`: inference must not need the training stack's
config or optimiser code, only torch + transformers for an HF directory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lemon.errors import ModelFileError
from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.orchestrator.base import Proposal
from lemon.orchestrator.policy_prompt import policy_messages
from lemon.orchestrator.repair import spec_from_output
from lemon.spec.roles import RoleLibrary

log = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = 320


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


class _HFGenerator:
    """A lazily loaded transformers model; one generation at a time (a CPU model gains nothing from more)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._model: Any = None
        self._tok: Any = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, Any]:
        if self._model is None:
            try:
                import torch
                from transformers import AutoModelForCausalLM, AutoTokenizer
            except ImportError as exc:
                raise ModelFileError(f"loading an HF policy needs the [train] extra ({exc.name} is missing); "
                                     "or export it with lemon export-gguf and pass the .gguf") from None
            self._tok = AutoTokenizer.from_pretrained(str(self.path))
            if self._tok.pad_token is None:
                self._tok.pad_token = self._tok.eos_token
            self._model = AutoModelForCausalLM.from_pretrained(str(self.path), dtype=torch.float32).eval()
        return self._model, self._tok

    def generate(self, messages: list[dict[str, str]], max_new_tokens: int, temperature: float,
                 seed: int) -> tuple[str, int, int]:
        import torch

        with self._lock:
            model, tok = self._load()
            prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
            kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": tok.pad_token_id}
            if temperature > 0:
                torch.manual_seed(seed)
                kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            else:
                kwargs.update(do_sample=False)
            with torch.no_grad():
                out = model.generate(**enc, **kwargs)
            new = out[0, enc["input_ids"].shape[1]:]
            text = tok.decode(new, skip_special_tokens=True)
            return text, int(enc["input_ids"].shape[1]), int(new.shape[0])


class TrainedOrchestrator:
    """Writes specs with a trained policy (HF directory or .gguf); implements `Orchestrator`."""

    def __init__(self, path: str | os.PathLike[str], roles: RoleLibrary, levels: Sequence[str], *,
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, temperature: float = 0.0) -> None:
        self.path = resolve_policy_path(path)
        self.roles = roles
        self.levels = tuple(levels)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self._gguf: Any = None
        self._hf: _HFGenerator | None = None
        if self.path.suffix == ".gguf":
            from lemon.llm.embedded import EmbeddedBackend

            self._gguf = EmbeddedBackend(str(self.path))
        else:
            self._hf = _HFGenerator(self.path)

    async def _complete(self, task: str, seed: int) -> tuple[str, int, int]:
        messages = policy_messages(task, self.roles, self.levels)
        if self._gguf is not None:
            req = ChatRequest(tuple(Message(m["role"], m["content"]) for m in messages),  # type: ignore[arg-type]
                              GenParams(temperature=self.temperature, max_tokens=self.max_new_tokens,
                                        seed=seed if self.temperature > 0 else None))
            c = await self._gguf.complete(req)
            return c.text, c.prompt_tokens, c.completion_tokens
        assert self._hf is not None
        return await asyncio.to_thread(self._hf.generate, messages, self.max_new_tokens, self.temperature, seed)

    async def propose(self, task: str, *, seed: int = 0) -> Proposal:
        raw, prompt_tokens, completion_tokens = await self._complete(task, seed)
        spec, source, warnings = spec_from_output(raw, self.roles, self.levels)
        for w in warnings:
            log.warning("trained orchestrator: %s", w)
        return Proposal(spec=spec, source=source, raw=raw, warnings=warnings,  # type: ignore[arg-type]
                        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        extra={"policy": str(self.path)})

    async def aclose(self) -> None:
        if self._gguf is not None:
            await self._gguf.aclose()
