"""Scoring a reply on the real SmolLM2 (the embedded default): the `Scorer` a stop rule's logprob gate asks.

The prompt is exactly the one `create_chat_completion` fed the model; the score is the sum of the reply's token
log-probabilities, as llama-cpp-python's own `create_completion(..., echo=True, logprobs=1)` reports them for the
same tokens in one pass on the same logits_all instance; the model's own greedy reply scores higher than its
words shuffled; and a reply longer than the scoring context is one line."""

from __future__ import annotations

import math
import random

import pytest

from lemon.errors import BackendError
from lemon.llm.base import ChatRequest, GenParams, Message, Scorer, can_score
from lemon.llm.embedded import EmbeddedBackend, chat_prompt_tokens

pytestmark = pytest.mark.models

REQUEST = ChatRequest((Message("system", "You are a careful math solver."),
                       Message("user", "Tom has 3 apples and buys 4 more. How many apples does he have?")),
                      GenParams(max_tokens=32))


async def test_smollm2_scores_its_own_reply_exactly_as_llama_cpp_reports_it() -> None:
    backend = EmbeddedBackend("smollm2-135m")
    try:
        assert isinstance(backend, Scorer) and can_score(backend)
        reply = (await backend.complete(REQUEST)).text
        fed = list(backend._llama.input_ids[:backend._llama.n_tokens])  # what create_chat_completion evaluated
        score = await backend.score(REQUEST, reply)
        assert math.isfinite(score) and score < 0
        assert await backend.score(REQUEST, reply) == score  # deterministic
        llama = backend._scoring
        prompt = chat_prompt_tokens(llama, REQUEST)
        assert fed[:len(prompt)] == prompt  # the same chat template, tokens and all

        words = reply.split()
        random.Random(0).shuffle(words)
        shuffled = " ".join(words)
        assert shuffled != reply and await backend.score(REQUEST, shuffled) < score - 5

        # llama-cpp-python's own log-probs of the same prompt + reply, evaluated as ours are: the prompt first
        # (primed here), then its generate() reuses that prefix and evaluates the reply (its echo path takes
        # text: the detokenized tokens, which re-tokenize to exactly the same ids, checked first)
        answer = llama.tokenize(reply.encode("utf-8"), add_bos=False, special=False)
        text = llama.detokenize(prompt + answer, special=True).decode("utf-8")
        assert llama.tokenize(text.encode("utf-8"), add_bos=True, special=True) == prompt + answer
        llama.reset()
        llama.eval(prompt)
        out = llama.create_completion(text, max_tokens=1, temperature=0.0, logprobs=1, echo=True)
        reported = out["choices"][0]["logprobs"]["token_logprobs"][-(len(answer) + 1):-1]
        assert sum(reported) == pytest.approx(score, abs=1e-3)
        tokens = await backend.token_logprobs(REQUEST, reply)  # the same numbers, token by token
        assert b"".join(t for t, _ in tokens).decode("utf-8") == reply
        assert [lp for _, lp in tokens] == pytest.approx(reported, abs=1e-3)
        assert await backend.score(REQUEST, "") == 0.0
    finally:
        await backend.aclose()


async def test_a_score_does_not_depend_on_the_call_before_it() -> None:
    """The next voter of a vote reuses the prompt's KV cache; its score must equal a fresh one (a score that
    depended on call order would make the LLM cache's scores differ by history)."""
    other = ChatRequest((Message("user", "Name a colour."),), GenParams(max_tokens=8))
    first, second = "Tom has 3 + 4 = 7 apples. The answer is 7.", "3 plus 4 is 7, so the answer is 7."
    backend = EmbeddedBackend("smollm2-135m")
    try:
        await backend.score(REQUEST, first)
        reused = await backend.score(REQUEST, second)  # the prompt's KV cache is reused
        await backend.score(other, "Blue.")
        assert await backend.score(REQUEST, second) == reused  # evaluated fresh after another prompt
    finally:
        await backend.aclose()


async def test_a_reply_longer_than_the_scoring_context_is_one_line() -> None:
    backend = EmbeddedBackend("smollm2-135m", n_ctx=256)  # scoring context min(256, 2048)
    try:
        with pytest.raises(BackendError) as err:
            await backend.score(REQUEST, "seven " * 400)
        assert "more than the scoring context of 256 tokens" in str(err.value) and "\n" not in str(err.value)
    finally:
        await backend.aclose()
