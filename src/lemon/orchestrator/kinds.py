"""Answer kinds as objects, registered once: what a task's answer is (a number, a letter, code) and everything
that follows from it.

Why one object: the kind used to be a `Literal` written three times, mapped to extractors twice, and compared
as a string wherever it mattered (the template's team, the baselines' roles, which baselines apply, which
answers a gold alone can grade). A kind is now one `AnswerKind`: how a task's text shows it (`detect`), how an
answer is read from a reply without the item (`extract`, also the vote key when `vote_on_answers`), how a
prediction is graded against a gold text (`check_gold`; None where only a benchmark's tests can judge), the
default team the template runs (`team`), the fixed baselines' roles (`roles`, `program_role`) and whether its
tasks show examples a program can be checked on (`runs_examples`: the `exsc` baseline).

Why here: the template orchestrator is the lowest reader of a kind (it picks a team from the task text), so the
registry sits in this layer; the extractors are the pure functions of the leaf `lemon.extract`, and the code
kind's team reads the task's examples through `lemon.runtime.examples_gate`, both below it.

Adding a kind: one `AnswerKind` (in its own module if it is large) and one entry in `_KINDS`; a kind defined
elsewhere (a test, a plug-in) enters with `register` (or `registered`, which takes it out again).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from lemon.errors import LemonError
from lemon.extract import extract_choice, extract_code, extract_number, numbers_equal
from lemon.registry import Registry
from lemon.runtime.examples_gate import sandbox_missing, task_code, task_examples

log = logging.getLogger(__name__)

Extractor = Callable[[str], "str | None"]


@dataclass(frozen=True)
class AnswerKind:
    """One kind of answer; see the module docstring for each part. `roles` are the fixed baselines' team:
    (first, primary, checker, final)."""

    name: str
    detect: Callable[[str], bool]
    extract: Extractor
    team: Callable[[str], str]
    roles: tuple[str, str, str, str]
    vote_on_answers: bool = True
    check_gold: Callable[[str, str], bool] | None = None
    program_role: str | None = None
    runs_examples: bool = False

    @property
    def vote_key(self) -> Extractor | None:
        """How a majority vote compares replies of this kind when no benchmark item is at hand (`lemon run`):
        by the extracted answer, or (None) by the whole text."""
        return self.extract if self.vote_on_answers else None


_OPTION = re.compile(r"^\s*\(?([A-J])[).:]\s+\S", re.MULTILINE)


def _shows_code(task: str) -> bool:
    """A Python signature or a code fence: what the examples gate's reader (`task_code`) reads as code, so a
    function pasted without a fence is read the same way by both (its kind, its team and its examples)."""
    return task_code(task) is not None


def _shows_options(task: str) -> bool:
    """At least three lettered options, `(A) ...` / `B) ...`, starting at A."""
    letters = [m.group(1) for m in _OPTION.finditer(task)]
    return len(letters) >= 3 and letters[:3] == ["A", "B", "C"]


def _code_team(task: str) -> str:
    """Five programmers behind the task's own examples when it shows examples the sandbox can run; else
    `code_unchecked`, one programmer (prompts/teams.yaml says why)."""
    if task_examples(task) is None:
        return "code_unchecked"
    if why := sandbox_missing():
        log.warning("this task's examples cannot be run here (%s); one programmer answers it unchecked", why)
        return "code_unchecked"
    return "code"


def _number_team(task: str) -> str:
    """The learned rule over prose and program voters where the sandbox can run programs; else
    `number_unchecked`, prose voters that stop once 2 agree (prompts/teams.yaml says why)."""
    if why := sandbox_missing():
        log.warning("program voters cannot run here (%s); prose voters answer this task unchecked", why)
        return "number_unchecked"
    return "number"


def letters_equal(prediction: str, gold: str) -> bool:
    """The choice kind's grader: the same option letter."""
    return prediction.strip().upper() == gold.strip().upper()


NUMBER = AnswerKind("number", detect=lambda task: True, extract=extract_number, team=_number_team,
                    roles=("analyst", "math_solver", "critic", "final_decision_maker"),
                    check_gold=numbers_equal, program_role="program_solver")
CHOICE = AnswerKind("choice", detect=_shows_options, extract=extract_choice, team=lambda task: "choice",
                    roles=("analyst", "knowledge_expert", "critic", "final_decision_maker"),
                    check_gold=letters_equal)
CODE = AnswerKind("code", detect=_shows_code, extract=extract_code, team=_code_team,
                  roles=("planner", "programmer", "tester", "final_decision_maker"), vote_on_answers=False,
                  runs_examples=True)

#: The registry, in listing order. Detection asks the LATER kinds first (a later kind is the more specific:
#: code before choice before number, which takes any task).
_KINDS: Registry[AnswerKind] = Registry("answer kind", lambda k: k.name, (NUMBER, CHOICE, CODE))
#: Add a kind defined outside this module (a plug-in, a test; its name new); or one for a `with` block.
register, registered = _KINDS.register, _KINDS.registered


def kind_names() -> tuple[str, ...]:
    """Every registered kind's name, in listing order."""
    return _KINDS.names()


def answer_kind(name: str) -> AnswerKind:
    """The kind registered as `name`; a one-line error names the known ones."""
    found = _KINDS.get(str(name))
    if found is None:
        raise LemonError(f"unknown answer kind {name!r}; expected one of: {', '.join(_KINDS.names())}")
    return found


def find_kind(name: str | None) -> AnswerKind | None:
    """The kind registered as `name`, or None (a trace without a known kind)."""
    return _KINDS.get(str(name))


def task_kind(task: str) -> str:
    """The kind a task's text asks for: the last registered kind whose `detect` accepts it."""
    return next(k.name for k in reversed(_KINDS.values()) if k.detect(task))


def reply_extractor(kind: str | None) -> Extractor | None:
    """How the answer of a task of kind `kind` is read from an agent's reply without the item: the kind's
    `extract` (a number, a letter, the program); None for an unknown kind (the whole text is the answer).

    Also what the majority votes of `lemon.run` and `lemon.execute` compare (a task run outside a benchmark;
    without it they compared whole reply texts, so sampled voters never agreed and `stop: {agree: 2}` could not
    fire): code too is voted on by
    its program, where `AnswerKind.vote_key` (the harness's, which has the item's own extractor) leaves code to
    whole texts; code compared as whole texts made the vote's tally each voter's prose, not its program."""
    found = find_kind(kind)
    return found.extract if found is not None else None


def extracted_answer(task: str, text: str) -> str | None:
    """The answer in `text` for the kind `task` asks for (a number, a letter, code), or None if none is found."""
    extract = reply_extractor(task_kind(task))
    return extract(text) if extract is not None else (text.strip() or None)
