"""`Forward` behaves as the read-only property it replaces: it reads the part's attribute, refuses assignment
even on a class whose instances take new attributes, and is itself on the class."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lemon.spec.forward import Forward
from lemon.spec.roles import Role


@dataclass
class _Part:
    value: int


@dataclass
class _Whole:
    part: _Part
    value = Forward[int]("part.value")


def test_reads_the_part_and_refuses_assignment() -> None:
    whole = _Whole(_Part(3))
    assert whole.value == 3
    whole.part.value = 4
    assert whole.value == 4  # read each time, never copied
    with pytest.raises(AttributeError, match=r"can't set _Whole.value: it reads self.part.value"):
        whole.value = 5  # type: ignore[misc]
    assert isinstance(_Whole.value, Forward) and _Whole.value.path == "part.value"


def test_a_role_reads_its_kind() -> None:
    vote, llm = Role("v", "votes", "", "vote"), Role("w", "writes", "prompt")
    assert (vote.votes, vote.calls_model, vote.runs_program) == (True, False, False)
    assert (llm.votes, llm.calls_model, llm.runs_program) == (False, True, False)
