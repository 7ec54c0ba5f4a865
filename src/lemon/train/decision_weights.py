"""Weights for the SFT loss that put the decision back into it: the target tokens of the fields whose value
differs between the targets.

Why: the budgeted teacher's three teams differ in one number, the gate's threshold, 1-2 of ~90 target tokens.
The mean token loss fell to 0.011 while the policy wrote SVAMP's threshold on 65 % of GSM8K items
(docs/results.md, "A teacher that aims at the bar"): the loss was the layout's, learnt at once, and the choice
was a rounding error in it. Weighting the tokens of the fields that carry the choice (found from the data,
not named by hand) makes the loss the choice's too. The spans are the canonical render's, the same that
counterfactual credit uses (`lemon.spec.render`), mapped to tokens as `token_spans` maps them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lemon.errors import SpecError
from lemon.spec.parse import parse_spec
from lemon.spec.render import FieldKind, Span, render_spec
from lemon.train.token_spans import char_span_to_token_indices, completion_offsets


def field_spans(text: str) -> dict[Span, FieldKind] | None:
    """Each editable field's span in a canonical spec text and its kind (a `copies` block's fields once);
    None when `text` is not the canonical text of the spec it parses to."""
    try:
        rendered = render_spec(parse_spec(text))
    except SpecError:
        return None
    if rendered.text != text:
        return None
    return {span: ref.kind for ref, span in rendered.spans.items()}


def decision_kinds(targets: Sequence[str]) -> frozenset[FieldKind]:
    """The field kinds whose written values differ between `targets` (a kind some targets lack counts too):
    where the data makes a choice. Non-canonical targets are left out."""
    per_target: list[dict[FieldKind, tuple[str, ...]]] = []
    for text in targets:
        spans = field_spans(text)
        if spans is None:
            continue
        values: dict[FieldKind, list[str]] = {}
        for span, kind in sorted(spans.items(), key=lambda item: item[0].start):
            values.setdefault(kind, []).append(text[span.start:span.end])
        per_target.append({kind: tuple(v) for kind, v in values.items()})
    kinds = {kind for values in per_target for kind in values}
    return frozenset(k for k in kinds if len({values.get(k, ()) for values in per_target}) > 1)


def decision_token_weights(tokenizer: Any, text: str, kinds: frozenset[FieldKind],
                           weight: float) -> tuple[list[int], list[float]]:
    """`text`'s token ids as SFT tokenises it (no special tokens) and one weight per token: `weight` on the
    tokens that overlap a field of `kinds`, 1.0 elsewhere (all 1.0 for a non-canonical text or no kinds)."""
    if not kinds:  # no offsets needed (nor a fast tokenizer)
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        return ids, [1.0] * len(ids)
    ids, offsets = completion_offsets(tokenizer, text)
    weights = [1.0] * len(offsets)
    for span, kind in (field_spans(text) or {}).items():
        if kind in kinds:
            for i in char_span_to_token_indices(offsets, span):
                weights[i] = weight
    return ids, weights
