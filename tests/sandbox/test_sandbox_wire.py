"""The channel between the tests' sandbox and the candidate's: builtin values cross exactly, nothing else does."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lemon.sandbox.child import MAX_MESSAGE_BYTES, decode, encode, read_message, write_message

scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**4000), max_value=2**4000)
           | st.floats(allow_nan=True, allow_infinity=True) | st.complex_numbers() | st.text() | st.binary())
hashables = st.recursive(scalars, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
                         max_leaves=10)
values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.sets(hashables, max_size=3)
                   | st.frozensets(hashables, max_size=3) | st.dictionaries(hashables, inner, max_size=3)),
    max_leaves=25,
)


def _shape(value: Any) -> Any:
    """Value and exact type, recursively; floats by repr (exact, and NaN and -0.0 comparable)."""
    if isinstance(value, float | complex):
        return (type(value), repr(value))
    if isinstance(value, list | tuple):
        return (type(value), [_shape(v) for v in value])
    if isinstance(value, dict):
        return (dict, sorted((repr(_shape(k)), _shape(v)) for k, v in value.items()))
    if isinstance(value, set | frozenset):
        return (type(value), sorted(repr(_shape(v)) for v in value))
    return (type(value), value)


@settings(deadline=None)  # a shared 2-core CI machine
@given(values)
def test_builtin_values_cross_exactly(value: Any) -> None:
    assert _shape(decode(encode(value))) == _shape(value)


@settings(deadline=None)  # a shared 2-core CI machine
@given(st.binary(max_size=200))
def test_any_bytes_decode_to_builtin_values_or_a_value_error(data: bytes) -> None:
    try:
        value = decode(data)
    except ValueError:
        return
    assert _shape(decode(encode(value))) == _shape(value)  # made of builtins only: it re-encodes exactly


@settings(deadline=None)  # a shared 2-core CI machine
@given(values, st.binary(min_size=1, max_size=8))
def test_trailing_bytes_are_refused(value: Any, extra: bytes) -> None:
    with pytest.raises(ValueError):
        decode(encode(value) + extra)


def test_a_lying_subclass_arrives_as_its_plain_base_type() -> None:
    class Liar(int):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = int.__hash__

    class LyingList(list):  # type: ignore[type-arg]
        def __eq__(self, other: object) -> bool:
            return True

    out = decode(encode([Liar(3), LyingList([1])]))
    assert type(out[0]) is int and out[0] == 3 and out[0] != 4
    assert type(out[1]) is list and out[1] != [2]


def test_an_arbitrary_object_cannot_be_sent() -> None:
    class AlwaysEqual:
        def __eq__(self, other: object) -> bool:
            return True

    with pytest.raises(TypeError, match="AlwaysEqual"):
        encode(AlwaysEqual())


def test_a_length_larger_than_the_message_is_refused() -> None:
    with pytest.raises(ValueError):
        decode(b"L999999999:")
    with pytest.raises(ValueError):
        decode(b"u5:ab")


def test_messages_are_framed_and_bounded() -> None:
    r, w = os.pipe()
    try:
        write_message(w, encode(("x" * 1000, {"k": [1.5]})))
        assert decode(read_message(r)) == ("x" * 1000, {"k": [1.5]})
        os.write(w, (MAX_MESSAGE_BYTES + 1).to_bytes(4, "big"))
        with pytest.raises(ValueError, match="exceeds"):
            read_message(r)
        os.close(w)
        w = -1
        with pytest.raises(EOFError):
            read_message(r)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
