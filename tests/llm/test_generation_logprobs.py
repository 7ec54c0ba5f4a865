"""Each reply's log-probability read from the generation itself (`SampledLogprobs`) on the real SmolLM2.

What must hold: the recorder changes no sampled token (the sample bank stays valid: same request, same text);
its value is the reply's own, within the last bits of today's teacher-forced score (one scoring pass evaluates
the reply in one batch, the generation one token at a time); a reply cut at max_tokens is covered to its last
token; and the LLM cache banks the value with the reply, so a logprob gate over cached or fresh draws takes it
without a scoring pass."""

from __future__ import annotations

import math

import pytest

from lemon.llm.base import ChatRequest, GenParams, Message
from lemon.llm.cache import CachedBackend, SQLiteCache, score_key
from lemon.llm.embedded import EmbeddedBackend

pytestmark = pytest.mark.models

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have? Think step by step."


def _request(seed: int, max_tokens: int = 96) -> ChatRequest:
    return ChatRequest((Message("system", "You are a careful math solver."), Message("user", QUESTION)),
                       GenParams(temperature=0.7, max_tokens=max_tokens, seed=seed))


def _plain_text(backend: EmbeddedBackend, request: ChatRequest) -> str:
    """The same request through llama-cpp-python with no logits processor: what the bank was drawn with."""
    p = request.params
    out = backend._llama.create_chat_completion(
        messages=[{"role": m.role, "content": m.content} for m in request.messages], temperature=p.temperature,
        top_p=p.top_p, max_tokens=p.max_tokens, stop=None, seed=p.seed)
    return str(out["choices"][0]["message"].get("content") or "")


async def test_the_recorder_changes_no_token_and_matches_the_teacher_forced_score() -> None:
    backend = EmbeddedBackend("smollm2-135m", n_threads=1)
    try:
        cut = 0
        for seed in range(6):
            request = _request(seed, max_tokens=24 if seed % 2 else 160)
            got = await backend.complete(request)
            assert got.text == _plain_text(backend, request)  # identical draw with and without the recorder
            cut += got.completion_tokens == request.params.max_tokens
            assert got.logprob is not None and math.isfinite(got.logprob) and got.logprob < 0
            forced = await backend.score(request, got.text)
            # a teacher-forced pass batches the reply, the generation decodes it token by token: on this 4-bit
            # model the logits differ by up to ~0.3 nats a token, in both directions (1.2 nats over a reply of
            # 119 tokens, 1.5 %, measured): the same tokens, scored within a few percent
            assert got.logprob == pytest.approx(forced, rel=0.03, abs=0.5), (seed, got.text)
        assert cut >= 2  # replies cut at max_tokens were covered to their last token
    finally:
        await backend.aclose()


async def test_the_cache_banks_the_generation_logprob_as_the_reply_score(tmp_path) -> None:
    inner = EmbeddedBackend("smollm2-135m", n_threads=1)
    cache = SQLiteCache(tmp_path / "llm.sqlite")
    backend = CachedBackend(inner, cache)
    try:
        request = _request(3)
        fresh = await backend.complete(request)
        assert fresh.logprob is not None and not fresh.cached
        assert cache.get_score(score_key(backend.model_id, request, fresh.text)) == fresh.logprob
        again = await backend.complete(request)
        assert again.cached and again.text == fresh.text and again.logprob == fresh.logprob
        # served with the cached reply (a score hit), and again when asked: no scoring pass either time
        assert again.logprob == fresh.logprob and backend.score_hits == 1
        assert await backend.score(request, fresh.text) == fresh.logprob and backend.score_hits == 2
    finally:
        await backend.aclose()
        cache.close()
