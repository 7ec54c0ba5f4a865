"""Decoding a transformers model under a grammar (llguidance), and the same mask replayed for the loss.

`SpecDecoding` holds one tokenizer's llguidance view and one compiled grammar (`lemon.spec.grammar`'s Lark
text). While sampling, `processor(rows)` is a transformers logits processor that sets every token the grammar
forbids next to -inf, so the sampled distribution is softmax(z / T) renormalised over the allowed tokens.
A policy-gradient loss must score THAT distribution: `masks(completions)` replays the grammar over the sampled
ids (deterministically: the same grammar and ids give the same masks) and `allowed(...)` turns them into the
[B, T, V] boolean mask that `lemon.train.credit.token_logprobs` applies before its log-softmax. A forbidden token
thus has probability zero both when sampled and when scored.

llguidance and torch are imported lazily: only the [train] extra has them (an exported `.gguf` policy decodes
under the GBNF notation of the same grammar inside llama.cpp instead).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from lemon.errors import ModelFileError
from lemon.spec.grammar import policy_grammar
from lemon.spec.roles import RoleLibrary

log = logging.getLogger(__name__)


class SpecDecoding:
    """One tokenizer and one grammar; `vocab_size` is the model's logits width (it may exceed the tokenizer's)."""

    def __init__(self, tokenizer: Any, lark: str, vocab_size: int, stop_ids: Iterable[int]) -> None:
        try:
            import llguidance
            import llguidance.hf
        except ImportError as exc:
            raise ModelFileError(f"decoding a policy under its grammar needs the [train] extra ({exc.name} is "
                                 "missing); install it, or switch the grammar off") from None
        self.stop_ids = frozenset(int(i) for i in stop_ids)
        self.vocab_size = int(vocab_size)
        self._ll = llguidance
        self._tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=self.vocab_size,
                                                        eos_token=sorted(self.stop_ids))
        self._grammar = llguidance.grammar_from("lark", lark)
        error = llguidance.LLMatcher.validate_grammar(self._grammar, self._tokenizer)
        if error:
            raise ValueError(f"the spec grammar does not compile: {error}")

    def matcher(self) -> Any:
        return self._ll.LLMatcher(self._tokenizer, self._grammar, log_level=0)

    def accepts(self, ids: Sequence[int]) -> bool:
        """Whether the token ids spell a whole text of the grammar (ending with a stop token or not)."""
        m = self.matcher()
        for t in ids:
            if t in self.stop_ids:
                return m.is_accepting()
            if not m.consume_token(int(t)):
                return False
        return m.is_accepting()

    def _fill(self, matcher: Any, bits: Any, row: int) -> None:
        from llguidance.torch import fill_next_token_bitmask

        fill_next_token_bitmask(matcher, bits, row)

    def masks(self, completions: Sequence[Sequence[int]], width: int) -> Any:
        """Packed masks [B, width, ceil(V / 32)] (int32 bits) of the tokens allowed at each completion position,
        as sampling saw them; every token is allowed past a row's end (the loss masks those positions out)."""
        import torch

        words = (self.vocab_size + 31) // 32
        out = torch.full((len(completions), width, words), -1, dtype=torch.int32)
        for b, ids in enumerate(completions):
            m = self.matcher()
            for t, token in enumerate(ids[:width]):
                self._fill(m, out[b], t)
                if token in self.stop_ids or not m.consume_token(int(token)):
                    break
        return out

    def processor(self, rows: int) -> Any:
        """A transformers logits processor for a batch of `rows` sequences (one grammar state each)."""
        return _GrammarProcessor(self, rows)


def spec_decoding(model: Any, tokenizer: Any, roles: RoleLibrary, levels: Sequence[str]) -> SpecDecoding:
    """The spec grammar of `roles` and the pool's `levels` for a transformers policy, stopping where training
    and inference stop (`hf.stop_token_ids`)."""
    from lemon.llm.hf import stop_token_ids

    lark = policy_grammar(roles, tuple(levels)).lark()
    return SpecDecoding(tokenizer, lark, int(model.config.vocab_size), stop_token_ids(model, tokenizer))


def unpack(bits: Any, vocab_size: int) -> Any:
    """Packed int32 masks [..., W] -> booleans [..., vocab_size] (bit j of word w is token 32 w + j). On the CPU
    through numpy's `unpackbits` (little-endian words: byte order is bit order), ~100x faster than the shifts
    used on an accelerator, where the masks go to be applied."""
    import torch

    if bits.device.type == "cpu":
        import numpy as np

        flat = np.unpackbits(bits.contiguous().numpy().view(np.uint8), axis=-1, bitorder="little")
        return torch.from_numpy(flat[..., :vocab_size]).bool()
    shifts = torch.arange(32, dtype=torch.int32, device=bits.device)
    flat = ((bits.unsqueeze(-1) >> shifts) & 1).bool()
    return flat.reshape(*bits.shape[:-1], bits.shape[-1] * 32)[..., :vocab_size]


class _GrammarProcessor:
    """A logits processor (transformers calls any `(input_ids, scores) -> scores`): each row's next-token
    scores masked to what its grammar state allows; a finished row is left alone (transformers pads it).
    The first call sees the prompt only; each later call first feeds every live row's last sampled token to its
    matcher."""

    def __init__(self, decoding: SpecDecoding, rows: int) -> None:
        self.decoding = decoding
        self.matchers = [decoding.matcher() for _ in range(rows)]
        self.done = [False] * rows
        self.started = False

    def _advance(self, input_ids: Any) -> None:
        last = input_ids[:, -1].tolist()
        for i, token in enumerate(last):
            if self.done[i]:
                continue
            if token in self.decoding.stop_ids or not self.matchers[i].consume_token(int(token)):
                self.done[i] = True

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.started:
            self._advance(input_ids)
        self.started = True
        words = (self.decoding.vocab_size + 31) // 32
        bits = torch.full((len(self.matchers), words), -1, dtype=torch.int32)
        for i, m in enumerate(self.matchers):
            if not self.done[i]:
                self.decoding._fill(m, bits, i)
        allowed = unpack(bits, scores.shape[-1]).to(scores.device)
        return scores.masked_fill(~allowed, float("-inf"))
