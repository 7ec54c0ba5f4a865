"""The trained policy as a `Backend`, so its requests go through the LLM cache like a worker's (see
`policy_card`): an HF model directory behind `HFChatGenerator`, or any backend (a .gguf's embedded llama.cpp)
under the policy's content identity instead of its path."""

from __future__ import annotations

import asyncio
import time

from lemon.llm.base import Backend, ChatRequest, Completion
from lemon.llm.hf import HFChatGenerator


class HFPolicyBackend:
    """An HF policy; decodes under the constraint its generator was built with, which the request's `grammar`
    names for the cache key (both come from the same roles and levels)."""

    def __init__(self, generator: HFChatGenerator, model_id: str) -> None:
        self.generator = generator
        self._model_id = model_id

    @property
    def model_id(self) -> str:
        return self._model_id

    async def complete(self, request: ChatRequest) -> Completion:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        params = request.params
        start = time.perf_counter()
        text, prompt_tokens, completion_tokens = await asyncio.to_thread(
            self.generator.generate, messages, params.max_tokens, params.temperature, params.seed or 0)
        return Completion(text, prompt_tokens, completion_tokens, time.perf_counter() - start, self._model_id)

    async def prepare(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class RenamedBackend:
    """`inner` under `model_id`: a .gguf policy's embedded backend is named by its path, a policy by content."""

    def __init__(self, inner: Backend, model_id: str) -> None:
        self.inner = inner
        self._model_id = model_id

    @property
    def model_id(self) -> str:
        return self._model_id

    async def complete(self, request: ChatRequest) -> Completion:
        return await self.inner.complete(request)

    async def prepare(self) -> None:
        await self.inner.prepare()

    async def aclose(self) -> None:
        await self.inner.aclose()
