"""Hugging Face transformers helpers shared by training and inference of the orchestrator policy.

Training samples the policy with these stop tokens, and the trained orchestrator must stop on exactly the
same set at inference: a model that learned to end a spec with a token inference ignores writes on past it.
torch and transformers are imported lazily (only the [train] extra has them).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lemon.errors import ModelFileError


def stop_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every token id that ends a completion (the tokenizer's EOS and the generation config's)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif eos:
        ids.update(int(e) for e in eos)
    return ids


@contextlib.contextmanager
def neutral_generation_config(model: Any) -> Iterator[None]:
    """While inside, `model.generate` samples softmax(z / T) of the raw logits and nothing else.

    transformers fills every argument `generate` is not given from the checkpoint's own generation_config
    (repetition_penalty, no_repeat_ngram_size, top_k, min_length, ...), but the training loss scores the raw
    logits: a penalty there makes the sampler and the scorer disagree (issue 25). The model's config is swapped
    for the library defaults (a peft model's lives on its base model) and put back afterwards.
    """
    from transformers import GenerationConfig

    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    saved = getattr(target, "generation_config", None)
    target.generation_config = GenerationConfig()
    try:
        yield
    finally:
        target.generation_config = saved


class HFChatGenerator:
    """A lazily loaded transformers chat model; one generation at a time (a CPU model gains nothing from more).

    `constrain(model, tokenizer)`, when given, builds the grammar every generation decodes under once the model
    is loaded (a `lemon.llm.constrained.SpecDecoding`: the trained orchestrator's spec grammar).
    """

    def __init__(self, path: Path, constrain: Callable[[Any, Any], Any] | None = None) -> None:
        self.path = path
        self.constrain = constrain
        self._model: Any = None
        self._tok: Any = None
        self._decoding: Any = None
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
            if self.constrain is not None:
                self._decoding = self.constrain(self._model, self._tok)
        return self._model, self._tok

    def generate(self, messages: list[dict[str, str]], max_new_tokens: int, temperature: float,
                 seed: int) -> tuple[str, int, int]:
        """(text, prompt tokens, completion tokens); sampled with a local generator seed when temperature > 0."""
        import torch

        with self._lock:
            model, tok = self._load()
            prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
            kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": tok.pad_token_id,
                                      "eos_token_id": sorted(stop_token_ids(model, tok))}
            if temperature > 0:
                torch.manual_seed(seed)
                kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            else:
                kwargs.update(do_sample=False)
            if self._decoding is not None:
                from transformers import LogitsProcessorList

                kwargs["logits_processor"] = LogitsProcessorList([self._decoding.processor(1)])
            with torch.no_grad(), neutral_generation_config(model):
                out = model.generate(**enc, **kwargs)
            new = out[0, enc["input_ids"].shape[1]:]
            text = tok.decode(new, skip_special_tokens=True)
            return text, int(enc["input_ids"].shape[1]), int(new.shape[0])
