"""The two engines that read the spec grammar, as acceptance checks of whole texts: llguidance's own matcher over
the real SmolLM2 tokenizer (`lemon.llm.constrained.SpecDecoding`, what the transformers policy decodes with) and
llama.cpp's grammar sampler over the real SmolLM2 GGUF vocabulary (what an exported `.gguf` policy decodes with),
driven token by token through llama.cpp's own C API: a token is allowed when the sampler leaves its logit finite."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lemon.llm.constrained import SpecDecoding
from lemon.spec.grammar import Grammar


class LlamaGrammarCheck:
    """llama.cpp's GBNF engine on a vocabulary-only load of a GGUF file (no weights: fast)."""

    def __init__(self, gguf: str) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=gguf, vocab_only=True, verbose=False)

    @contextmanager
    def sampler(self, gbnf: str) -> Iterator[Any]:
        import llama_cpp

        smpl = llama_cpp.llama_sampler_init_grammar(self.llm._model.vocab, gbnf.encode(), b"root")
        if not smpl:
            raise ValueError("llama.cpp could not parse the grammar")
        try:
            yield smpl
        finally:
            llama_cpp.llama_sampler_free(smpl)

    @staticmethod
    def allowed(smpl: Any, token: int) -> bool:
        import llama_cpp

        data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
        arr = llama_cpp.llama_token_data_array(data, 1, -1, False)
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
        return bool(data[0].logit != float("-inf"))

    def accepts(self, gbnf: str, text: str) -> bool:
        """Every token of `text` allowed in turn, then the end of the text (EOS)."""
        import llama_cpp

        with self.sampler(gbnf) as smpl:
            for t in self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False):
                if not self.allowed(smpl, t):
                    return False
                llama_cpp.llama_sampler_accept(smpl, t)
            return self.allowed(smpl, self.llm.token_eos())


def guidance_accepts(decoding: SpecDecoding, tokenizer: Any, text: str) -> bool:
    return decoding.accepts(tokenizer(text, add_special_tokens=False)["input_ids"])


def both_accept(grammar: Grammar, decoding: SpecDecoding, tokenizer: Any, llama: LlamaGrammarCheck,
                text: str) -> tuple[bool, bool]:
    return guidance_accepts(decoding, tokenizer, text), llama.accepts(grammar.gbnf(), text)
