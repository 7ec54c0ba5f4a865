"""Map character spans of a rendered spec (field values) to the completion's token indices.

Counterfactual credit lands ONLY on the tokens of the edited field, so this mapping decides what "local"
means. A token that straddles a span boundary counts as inside: it partly encodes the field value, and
leaving it out would give part of the field no credit at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from lemon.spec.edits import rewrite_window

_REPLACEMENT = "\ufffd"


class SpanLike(Protocol):
    """Character offsets [start, end) into a text (``lemon.spec.render.Span`` satisfies this)."""

    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


def char_span_to_token_indices(offsets: Sequence[tuple[int, int]], span: SpanLike) -> list[int]:
    """Indices of the tokens whose character range [s, e) overlaps `span`; empty span -> [].

    Zero-width tokens (special tokens, offset (0, 0)) cover no character and never count.
    """
    if span.start < 0 or span.end < span.start:
        raise ValueError(f"bad span [{span.start}, {span.end})")
    if span.end == span.start:
        return []
    return [i for i, (s, e) in enumerate(offsets) if s < e and s < span.end and e > span.start]


def completion_offsets(tokenizer: Any, completion_text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Tokenise a completion (no special tokens) with character offsets, via the fast tokenizer.

    Use this when the completion's tokens ARE its tokenisation (SFT targets, re-scored texts). For sampled
    completions, whose token ids need not be the canonical tokenisation, use `offsets_from_token_ids`.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("offset mappings need a fast tokenizer")
    enc = tokenizer(completion_text, add_special_tokens=False, return_offsets_mapping=True)
    return list(enc["input_ids"]), [(int(s), int(e)) for s, e in enc["offset_mapping"]]


def offsets_from_token_ids(tokenizer: Any, token_ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """Decode sampled token ids and give each token the character range it adds to the decoded text.

    Token i covers [len(decode(ids[:i])), len(decode(ids[:i+1]))). Byte-level tokens can end inside a
    multi-byte character (the decoder shows U+FFFD until it completes); such a token also covers the
    character it helps complete, as the fast tokenizer's own offsets do. A trailing incomplete character
    (a completion cut off mid-character) leaves its tokens without that character. Special tokens stay in
    the text, as the sampler produced them. Returns (decoded text, offsets). Quadratic in length, which is
    fine for specs (a few hundred tokens).
    """
    ids = list(token_ids)
    offsets: list[tuple[int, int]] = []
    pending: list[int] = []  # tokens holding bytes of a character that is not complete yet
    prev = 0
    for i in range(len(ids)):
        partial = tokenizer.decode(ids[: i + 1], skip_special_tokens=False,
                                   clean_up_tokenization_spaces=False)
        end = max(prev, len(partial.rstrip(_REPLACEMENT)))
        if end > prev and pending:
            for j in pending:  # the first new character is the one they helped complete
                s, _ = offsets[j]
                offsets[j] = (min(s, prev), prev + 1)
            pending = []
        offsets.append((prev, end))
        if partial.endswith(_REPLACEMENT):
            pending.append(i)
        prev = end
    text = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return text, offsets


def edit_window(text: str, start: int, end: int, kind: str, replacement: str) -> tuple[int, int, str]:
    """The characters a counterfactual edit rewrites in the canonical text, and what it writes there (the
    edit family's own rule: `lemon.spec.edits.rewrite_window`)."""
    return rewrite_window(text, start, end, kind, replacement)


def first_divergence(ids: Sequence[int], offsets: Sequence[tuple[int, int]], text: str, start: int, end: int,
                     replacement: str, tokenize: Callable[[str], Sequence[int]]) -> tuple[int, int] | None:
    """(completion position, token id) where the completion and its edit (text[start:end] -> replacement)
    first differ: everything before is shared, so that token carries the choice between the two values.

    The edit is tokenised from the start of the first token it touches (BPE merges do not cross a token the
    two texts share); None when no token differs (e.g. an edit that does not change the text).
    """
    k = next((i for i, (_, b) in enumerate(offsets) if b > start), None)
    if k is None or text[start:end] == replacement:
        return None
    edited = text[:start] + replacement + text[end:]
    base = offsets[k][0]
    window = edited[base:start + len(replacement) + 16]  # past the change, so its last token is complete
    for j, (written, edit) in enumerate(zip(ids[k:], tokenize(window), strict=False)):
        if written != edit:
            return k + j, int(edit)
    return None
