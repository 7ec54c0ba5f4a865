"""Field spans of a rendered spec map to exactly the completion tokens that encode them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings

from lemon.train.token_spans import char_span_to_token_indices, completion_offsets, offsets_from_token_ids


@dataclass(frozen=True)
class S:
    start: int
    end: int


def test_char_span_overlap_rules() -> None:
    offsets = [(0, 3), (3, 5), (5, 5), (5, 9), (9, 10), (0, 0)]
    assert char_span_to_token_indices(offsets, S(3, 5)) == [1]
    assert char_span_to_token_indices(offsets, S(4, 6)) == [1, 3]  # straddling tokens count as inside
    assert char_span_to_token_indices(offsets, S(0, 10)) == [0, 1, 3, 4]  # zero-width tokens never count
    assert char_span_to_token_indices(offsets, S(4, 4)) == []
    assert char_span_to_token_indices(offsets, S(10, 12)) == []
    with pytest.raises(ValueError):
        char_span_to_token_indices(offsets, S(5, 4))


def _check_mapping(text: str, offsets: list[tuple[int, int]], ids: list[int], tok: Any, span: Any) -> None:
    idx = char_span_to_token_indices(offsets, span)
    if span.end == span.start:
        assert idx == []
        return
    assert idx, f"no token for span {span}"
    assert idx == list(range(idx[0], idx[-1] + 1)), "mapped tokens are not contiguous"
    # The mapped tokens' character ranges cover the span ...
    assert min(offsets[i][0] for i in idx) <= span.start
    assert max(offsets[i][1] for i in idx) >= span.end
    # ... and decoding exactly those tokens gives text that contains the field value.
    assert text[span.start:span.end] in tok.decode([ids[i] for i in idx])
    # No token outside the set touches the span.
    for i, (s, e) in enumerate(offsets):
        if i not in idx:
            assert not (s < e and s < span.end and e > span.start), f"token {i} {s, e} overlaps {span}"


def _specs() -> Any:
    from tests.spec_strategies import specs

    return specs()


@pytest.mark.train
@settings(deadline=None, max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_specs())
def test_every_field_span_maps_to_its_tokens(spec: Any, tokenizer: Any) -> None:
    from lemon.spec.render import render_spec

    rendered = render_spec(spec)
    ids, offsets = completion_offsets(tokenizer, rendered.text)
    # The GGUF-derived SmolLM2 tokenizer cannot encode a few code points (e.g. U+40000 becomes three
    # unrelated byte tokens). Such text can never be sampled as such, so it is outside the property: what
    # the trainer maps is always the decoded text of sampled ids (offsets_from_token_ids).
    assume(tokenizer.decode(ids) == rendered.text)
    assert rendered.spans, "a rendered spec has fields"
    for span in rendered.spans.values():
        _check_mapping(rendered.text, offsets, ids, tokenizer, span)
    # Sampled-token offsets agree with the tokenizer's own offsets when the ids are its tokenisation.
    text, from_ids = offsets_from_token_ids(tokenizer, ids)
    assert text == rendered.text
    assert from_ids == offsets


@pytest.mark.train
def test_offsets_from_token_ids_on_multibyte_and_special(tokenizer: Any) -> None:
    for text in ['duty: "héllo 日本語 wörld 🙂"\n', "🙂🙂 a🙂b", "x<|im_end|>"]:
        ids, offsets = completion_offsets(tokenizer, text)
        decoded, from_ids = offsets_from_token_ids(tokenizer, ids)
        assert decoded == text and from_ids == offsets
    # A completion cut off inside a character: the dangling token covers nothing.
    ids, _ = completion_offsets(tokenizer, "a🙂")
    text, offs = offsets_from_token_ids(tokenizer, ids[:-1])
    assert offs[0] == (0, 1)
    assert all(s <= e for s, e in offs)
