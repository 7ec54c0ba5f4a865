"""Embedded inference: llama-cpp-python over a verified local GGUF file.

llama.cpp is not re-entrant, so every call to one model runs on that model's own single worker thread: calls
are serialised at the thread level (a cancelled await can never let two calls into the same model), while
different models run concurrently on their own threads. The model loads lazily on first use.

`score` (the `Scorer` protocol: a stop rule's logprob gate) runs a teacher-forced pass on a second instance of
the same file that keeps every position's logits (`logits_all`, a context of at most `SCORE_N_CTX`), loaded on
first use and called on the same thread; the sampling instance is never touched by it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lemon.errors import BackendError, ModelFileError
from lemon.llm.base import ChatRequest, Completion, Message
from lemon.llm.models import ensure_model, verify_sha256

if TYPE_CHECKING:
    from llama_cpp.llama_types import ChatCompletionRequestMessage

log = logging.getLogger(__name__)

DEFAULT_N_CTX = 8192
# The scoring instance's context: logits_all keeps n_ctx x vocabulary floats (about 1.2 GB for Qwen2.5's
# 151,936 tokens at 2048), and a voter's prompt and 384-token reply fit with room to spare.
SCORE_N_CTX = 2048
# Rows of logits turned into log-probabilities at once (float64; bounds the scratch memory of a long reply).
_SCORE_ROWS = 64
MAX_THREADS = 256  # as pools.MAX_THREADS: llama.cpp crashed (SIGSEGV) on 100000 threads


def gpu_layers_from_env() -> int:
    """Layers to offload to a GPU (`LEMON_GPU_LAYERS`, -1 for all). Only a llama-cpp-python built with CUDA or
    Metal can use it; the default 0 keeps every model on the CPU, which is what the pools are measured on."""
    raw = os.environ.get("LEMON_GPU_LAYERS", "0").strip() or "0"
    try:
        return int(raw)
    except ValueError:
        raise ModelFileError(f"LEMON_GPU_LAYERS={raw!r} is not an integer; use 0 (CPU), N or -1 (all)") from None


def threads_from_env() -> int | None:
    """CPU threads of each embedded model when its pool level sets none (`LEMON_THREADS`, what `--threads`
    sets), so N processes sharing a machine can split its cores; None: the default below."""
    raw = os.environ.get("LEMON_THREADS", "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_THREADS:
        raise ModelFileError(f"LEMON_THREADS={raw!r} is not a thread count; use an integer in 1..{MAX_THREADS}")
    return value


class EmbeddedBackend:
    """A GGUF model in this process. `model` is a pinned id (see `models.py`) or a path to a .gguf file."""

    def __init__(self, model: str, *, n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None,
                 sha256: str | None = None, n_gpu_layers: int | None = None, read_logprobs: bool = True) -> None:
        self._model = model
        self.read_logprobs = read_logprobs  # each reply's log-probability from its generation (`SampledLogprobs`)
        self._sha256 = sha256
        self.n_ctx = n_ctx
        self.n_gpu_layers = gpu_layers_from_env() if n_gpu_layers is None else n_gpu_layers
        # Fully offloaded, the CPU threads only feed the GPU: one keeps many model processes from thrashing.
        self.n_threads = n_threads or threads_from_env() or (1 if self.n_gpu_layers else max(1, os.cpu_count() or 1))
        self._llama: Any = None
        self._scoring: Any = None  # the logits_all instance `score` uses, loaded on first use
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"llama-{Path(model).stem}")

    @property
    def model_id(self) -> str:
        return f"embedded:{self._model}"

    @property
    def reads_logprobs(self) -> bool:
        """Whether each completion carries its reply's log-probability, read from the generation."""
        return self.read_logprobs

    def _path(self) -> Path:
        return verified_model_file(self._model, self._sha256)

    def _load(self) -> Any:
        if self._llama is None:
            from llama_cpp import Llama

            path = self._path()
            start = time.perf_counter()
            try:
                self._llama = Llama(model_path=str(path), n_ctx=self.n_ctx, n_threads=self.n_threads,
                                    n_gpu_layers=self.n_gpu_layers, verbose=False, seed=0)
            except (ValueError, RuntimeError) as exc:
                raise ModelFileError(f"cannot load {path} as a GGUF model ({exc}); pin its sha256 in the pool "
                                     "file or reinstall the model packages") from None
            log.info("loaded %s in %.2fs", path.name, time.perf_counter() - start)
        return self._llama

    async def prepare(self) -> None:
        """Verify and load the model now (normally lazy); `ModelFileError` for a missing or corrupted file."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._load)

    def _call(self, request: ChatRequest) -> Completion:
        return self._generate(request, SampledLogprobs() if self.read_logprobs else None)

    def _generate(self, request: ChatRequest, recorder: SampledLogprobs | None) -> Completion:
        """One chat completion; with a `recorder`, the reply's log-probability read from the generation."""
        llama = self._load()
        p = request.params
        kwargs: dict[str, Any] = {
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "temperature": p.temperature,
            "top_p": p.top_p,
            "max_tokens": p.max_tokens,
            "stop": list(p.stop) or None,
            "seed": p.seed if p.seed is not None else 0,
        }
        if p.repeat_penalty is not None:
            kwargs["repeat_penalty"] = p.repeat_penalty
        if request.grammar is not None:
            from llama_cpp import LlamaGrammar

            kwargs["grammar"] = LlamaGrammar.from_string(request.grammar, verbose=False)
        elif request.json_schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": request.json_schema}
        if recorder is not None:
            kwargs["logits_processor"] = [recorder]
        start = time.perf_counter()
        try:
            out = llama.create_chat_completion(**kwargs)
        except ValueError as exc:  # e.g. the prompt exceeds the context window
            raise BackendError(f"{self.model_id}: {exc}") from None
        usage = out.get("usage") or {}
        choice = out["choices"][0]
        text = choice["message"].get("content") or ""
        return Completion(text, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                          time.perf_counter() - start, self.model_id,
                          logprob=recorder.reply_logprob(llama, text, choice.get("finish_reason"))
                          if recorder is not None else None)

    async def complete(self, request: ChatRequest) -> Completion:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._call, request)

    def _sampled(self, request: ChatRequest) -> tuple[Completion, list[TokenLogprob]]:
        recorder = SampledLogprobs(best=True)
        out = self._generate(request, recorder)
        if out.logprob is None:  # the tokens cannot be shown to spell the reply: the scoring pass's, as the gate's
            return out, [TokenLogprob(token, lp) for token, lp in self._token_logprobs(request, out.text)]
        llama = self._llama
        return out, [TokenLogprob(llama.detokenize([t]), lp, llama.detokenize([b]), best)
                     for t, lp, (b, best) in zip(recorder.tokens, recorder.values, recorder.best, strict=False)]

    async def complete_with_tokens(self, request: ChatRequest) -> tuple[Completion, list[TokenLogprob]]:
        """`complete`, the same draw, with each reply token's log-probability and the most likely token at its
        step (what an OpenAI-compatible server sends as `logprobs`: `embedded_server.py`). A reply whose sampled
        tokens cannot be shown to spell it (`reply_logprob` is None) gets its tokens from the scoring pass, the
        one a logprob gate runs on it in process, without the most likely ones."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._sampled, request)

    def _load_scoring(self) -> Any:
        if self._scoring is None:
            from llama_cpp import Llama

            path = self._path()
            try:
                self._scoring = Llama(model_path=str(path), n_ctx=min(self.n_ctx, SCORE_N_CTX),
                                      n_threads=self.n_threads, n_gpu_layers=self.n_gpu_layers, logits_all=True,
                                      verbose=False, seed=0)
            except (ValueError, RuntimeError) as exc:
                raise ModelFileError(f"cannot load {path} as a GGUF model to score replies ({exc}); pin its "
                                     "sha256 in the pool file or reinstall the model packages") from None
        return self._scoring

    def _score(self, request: ChatRequest, reply: str) -> float:
        return float(sum(lp for _, lp in self._token_logprobs(request, reply)))

    def _token_logprobs(self, request: ChatRequest, reply: str) -> list[tuple[bytes, float]]:
        llama = self._load_scoring()
        prompt = chat_prompt_tokens(llama, request)
        answer = llama.tokenize(reply.encode("utf-8"), add_bos=False, special=False) if reply else []
        if len(prompt) + len(answer) > llama.n_ctx():
            raise BackendError(f"{self.model_id}: cannot score a reply of {len(answer)} tokens after a prompt of "
                               f"{len(prompt)}: more than the scoring context of {llama.n_ctx()} tokens; shorten "
                               "the agents' max_tokens or drop the logprob gate")
        if not answer:
            return []
        try:
            eval_prompt_then_reply(llama, prompt, answer)
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"{self.model_id}: scoring failed ({' '.join(str(exc).split())})") from None
        logprobs = reply_token_logprobs(llama.scores, len(prompt), answer)
        return [(llama.detokenize([t]), lp) for t, lp in zip(answer, logprobs, strict=True)]

    async def token_logprobs(self, request: ChatRequest, reply: str) -> list[tuple[bytes, float]]:
        """(token bytes, log-probability) of each of `reply`'s tokens after `request`'s messages, as `score`
        computes them (its value is their sum): which part of a reply the model was sure of, e.g. its answer."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._token_logprobs, request, reply)

    async def score(self, request: ChatRequest, reply: str) -> float:
        """The sum of `reply`'s token log-probabilities after `request`'s messages (see `Scorer`): the prompt
        exactly as `create_chat_completion` builds it (`chat_prompt_tokens`), then the reply's tokens, one
        teacher-forced pass, a log-softmax over each position's logits."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._score, request, reply)

    async def aclose(self) -> None:
        self._thread.shutdown(wait=True, cancel_futures=True)
        for llama in (self._llama, self._scoring):
            if llama is not None:
                llama.close()
        self._llama = self._scoring = None


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One reply token as a server reports it: its bytes and log-probability, and (when known) the most likely
    token at its step under the raw logits with that token's log-probability."""

    token: bytes
    logprob: float
    best: bytes | None = None
    best_logprob: float | None = None


class SampledLogprobs:
    """Each sampled token's log-probability under the raw logits, read from the generation itself.

    llama-cpp-python calls a logits processor once per sampled token with the tokens so far and the next
    position's raw logits (before penalties, temperature and top-k/p); returned unchanged, they sample exactly
    as without it. The token drawn from step t's logits is the last token seen at step t+1, so each call
    settles the step before; `reply_logprob` settles the last one. Cost: one copy and one log-sum-exp of a
    vocabulary row per token (~0.3 ms for Qwen2.5's 151,936 entries, against ~35 ms to generate the token).
    With `best`, each step's most likely token and its log-probability too (`best`, one per step; a server's
    `top_logprobs: 1`), one argmax more per token."""

    def __init__(self, *, best: bool = False) -> None:
        self.tokens: list[int] = []
        self.values: list[float] = []
        self.best: list[tuple[int, float]] = []
        self._keep_best = best
        self._pending: float | None = None  # the last step's log-partition; its logits wait in `_row`
        self._row: Any = None  # the last step's logits (contiguous float32, reused every step)
        self._scratch: Any = None

    def __call__(self, input_ids: Any, logits: Any) -> Any:
        import numpy as np

        if self._pending is not None:
            self._settle(int(input_ids[-1]))
        if self._row is None or self._row.shape != logits.shape:
            self._row, self._scratch = np.empty(logits.shape, np.float32), np.empty(logits.shape, np.float32)
        np.copyto(self._row, logits)  # the processor's view is strided and freed after the step: copy once
        top = float(self._row.max())
        np.subtract(self._row, top, out=self._scratch)
        np.exp(self._scratch, out=self._scratch)
        self._pending = top + float(np.log(self._scratch.sum(dtype=np.float64)))
        if self._keep_best:
            self.best.append((int(self._row.argmax()), top - self._pending))
        return logits

    def _settle(self, token: int) -> None:
        assert self._pending is not None
        self.tokens.append(token)
        self.values.append(float(self._row[token]) - self._pending)
        self._pending = None

    def reply_logprob(self, llama: Any, text: str, finish_reason: str | None) -> float | None:
        """The reply's summed log-probability, or None when the sampled tokens cannot be shown to spell `text`
        (a stop string cut it, or the last token of a reply cut at max_tokens is ambiguous): a logprob gate
        then scores the reply instead, so a value is only ever the reply's own."""
        if finish_reason == "length" and self._pending is not None:  # the last token, sampled but never seen
            known = llama.detokenize(self.tokens) if self.tokens else b""
            rest = text.encode("utf-8")[len(known):]
            last = llama.tokenize(rest, add_bos=False, special=False) if rest else []
            if len(last) != 1:
                return None
            self._settle(int(last[0]))
        spelled = llama.detokenize(self.tokens).decode("utf-8", errors="ignore") if self.tokens else ""
        return float(sum(self.values)) if spelled == text else None


def _llama_message(m: Message) -> ChatCompletionRequestMessage:
    """One message as llama-cpp-python's chat formatter types it (a TypedDict per role)."""
    from llama_cpp.llama_types import (
        ChatCompletionRequestAssistantMessage,
        ChatCompletionRequestSystemMessage,
        ChatCompletionRequestUserMessage,
    )

    if m.role == "system":
        return ChatCompletionRequestSystemMessage(role="system", content=m.content)
    if m.role == "user":
        return ChatCompletionRequestUserMessage(role="user", content=m.content)
    return ChatCompletionRequestAssistantMessage(role="assistant", content=m.content)


def chat_prompt_tokens(llama: Any, request: ChatRequest) -> list[int]:
    """The tokens `llama.create_chat_completion` feeds the model for `request`'s messages: the chat template
    it picked from the GGUF metadata (`tokenizer.chat_template`), rendered by llama-cpp-python's own
    `Jinja2ChatFormatter` with the generation prompt, tokenized with special tokens as its chat handler does."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    name = str(llama.chat_format or "")
    suffix = name.removeprefix("chat_template.")
    key = "tokenizer.chat_template" if suffix == "default" else f"tokenizer.chat_template.{suffix}"
    template = llama.metadata.get(key) if name.startswith("chat_template.") else None
    if template is None:
        raise BackendError(f"embedded model uses the built-in chat format {name!r}, not a template in its GGUF "
                           "file; scoring replies needs a model whose file carries tokenizer.chat_template")
    eos, bos = llama.token_eos(), llama.token_bos()
    formatter = Jinja2ChatFormatter(template=template, stop_token_ids=[eos],
                                    eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
                                    bos_token=llama._model.token_get_text(bos) if bos != -1 else "")
    try:
        result = formatter(messages=[_llama_message(m) for m in request.messages])
    except Exception as exc:  # a template's own raise_exception, or a Jinja error: one line either way
        raise BackendError(f"chat template of the embedded model failed ({' '.join(str(exc).split())[:200]})") \
            from None
    return list(llama.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True))


def eval_prompt_then_reply(llama: Any, prompt: list[int], answer: list[int]) -> None:
    """Evaluate the prompt, then the reply, as two separate passes; the prompt's KV cache is kept, so the next
    reply to the same prompt (the next voter of a vote) evaluates only its own tokens: a third to half of the
    scoring time of a vote. Always two passes, reused or fresh: how tokens are batched changes the logits in
    their last bits (one pass against two differs by up to ~0.5 nats over a reply), so a score must not depend
    on which call came before it."""
    n = len(prompt)
    if llama.n_tokens >= n and list(llama.input_ids[:n]) == prompt:
        llama.n_tokens = n  # `eval` drops the KV cache past n_tokens: the last reply's tokens
    else:
        llama.reset()
        llama.eval(prompt)
    llama.eval(answer)


def reply_token_logprobs(scores: Any, prompt_len: int, answer: list[int]) -> list[float]:
    """Per reply token, log softmax(logits)[token], where row i of `scores` holds the logits after token i (so
    the reply's k-th token is predicted by row prompt_len + k - 1); float64, a few rows at a time."""
    import numpy as np

    out: list[float] = []
    for start in range(0, len(answer), _SCORE_ROWS):
        ids = np.asarray(answer[start:start + _SCORE_ROWS])
        rows = np.asarray(scores[prompt_len - 1 + start:prompt_len - 1 + start + len(ids)], dtype=np.float64)
        top = rows.max(axis=1, keepdims=True)
        log_z = top[:, 0] + np.log(np.exp(rows - top).sum(axis=1))
        out.extend((rows[np.arange(len(ids)), ids] - log_z).tolist())
    return out


def verified_model_file(model: str, sha256: str | None) -> Path:
    """The verified GGUF of an embedded level: a pinned model id (assembled and checked), or a .gguf path
    checked against its sha256 when one is given. In process or served (`serve.py`), the same file."""
    if not model.endswith(".gguf"):
        return ensure_model(model)
    path = Path(model).expanduser()
    if not path.is_file():
        raise ModelFileError(f"model file {path} does not exist; fix the pool's `model:` path")
    if sha256:
        verify_sha256(path, sha256, f"model file {path.name}")
    return path
