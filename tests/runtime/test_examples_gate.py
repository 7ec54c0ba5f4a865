"""A stop rule's `examples` gate: the first parent whose program passes the task's own examples is taken alone.

The examples are read from the task text (a real HumanEval prompt, as the harness poses it); each program runs
in the real sandbox. The workers are a scripted test double keyed by each voter's duty, so which parents run
and which program each wrote is known exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.benchmarks.base import Item
from lemon.benchmarks.humaneval import code_prompt
from lemon.benchmarks.registry import load_split
from lemon.evaluation.baselines import baseline_spec, supports
from lemon.llm.base import ChatRequest
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.runtime.examples_gate import TaskExamples, passes_examples, task_code, task_examples
from lemon.sandbox.runner import SandboxError
from lemon.spec.model import Agent, Spec, StopRule
from lemon.spec.roles import RoleLibrary
from tests.pools import scripted_pool

ROLES = RoleLibrary.load()


def _item(data_dir: Path, item_id: str = "HumanEval/0") -> Item:
    return next(i for i in load_split("humaneval", "test", data_dir) if i.id == item_id)


def _program(item: Item, body: str | None = None) -> str:
    """A reply with the whole function: the canonical solution, or `body`."""
    return f"Here it is.\n```python\n{item.meta['prompt']}{body or item.meta['canonical_solution']}```"


def test_the_examples_are_read_from_the_task_text_alone(data_dir: Path) -> None:
    found = task_examples(code_prompt(_item(data_dir)))
    assert found == TaskExamples("has_close_elements", found.code if found else "", (
        ("has_close_elements([1.0, 2.0, 3.0], 0.5)", "False"),
        ("has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)", "True")))
    assert task_examples("What is 2 + 2?") is None
    assert task_examples("```python\ndef f(x):\n    return x\n```") is None  # a function without examples
    # an example that wraps the call is not the function's: none left, so no examples
    assert task_examples(code_prompt(_item(data_dir, "HumanEval/32"))) is None


def test_a_program_passes_only_when_it_defines_the_function_and_gets_every_example(data_dir: Path) -> None:
    item = _item(data_dir)
    examples = task_examples(code_prompt(item))
    assert examples is not None
    assert passes_examples(_program(item), examples)
    assert not passes_examples(_program(item, "    return False\n"), examples)  # right on one example of two
    assert not passes_examples(_program(item, "    while True:\n        pass\n"), examples)  # cut by the time limit
    assert not passes_examples("```python\nimport os\nos.system('echo hi')\n```", examples)  # no function
    assert not passes_examples("No code, sorry.", examples)


def _voters(programs: list[str]) -> ScriptedBackend:
    def reply(request: ChatRequest) -> str:
        system = request.messages[0].content
        return next(p for i, p in enumerate(programs) if f"Voter {i}." in system)
    return ScriptedBackend("scripted", responder=reply)


def _team(n: int, rule: StopRule) -> Spec:
    voters = tuple(Agent(name=f"v{i}", role="programmer", duty=f"Voter {i}.", capacity="large") for i in range(n))
    vote = Agent(name="vote", role="majority_vote", capacity="large", depends_on=tuple(v.name for v in voters),
                 stop=rule)
    return Spec(agents=(*voters, vote), output="vote")


async def test_voters_run_one_at_a_time_until_a_program_passes_and_it_answers_alone(data_dir: Path) -> None:
    item = _item(data_dir)
    wrong, right = _program(item, "    return False\n"), _program(item)
    result = await Executor(scripted_pool(_voters([wrong, right, wrong, wrong])), ROLES).run(
        _team(4, StopRule(examples=True)), code_prompt(item))
    ran = [e["agent"] for e in result.trace.events if e["type"] == "return" and e["agent"] != "vote"]
    assert ran == ["v0", "v1"] and result.answer == right
    stop = result.early_stops[0]
    assert stop["fired"] and stop["sure"] == "v1" and stop["scores"] == {"v0": 0, "v1": 1}
    assert stop["skipped"] == ["v2", "v3"] and stop["rule"] == "{examples: true}"


async def test_without_a_passing_program_or_without_examples_every_voter_runs_and_the_vote_stands(
        data_dir: Path) -> None:
    item = _item(data_dir)
    wrong, other = _program(item, "    return False\n"), _program(item, "    return True\n")
    pool = scripted_pool(_voters([wrong, other, other]))
    failing = await Executor(pool, ROLES).run(_team(3, StopRule(examples=True)), code_prompt(item))
    assert failing.answer == other and not failing.early_stops[0]["fired"]  # the vote of all three
    no_examples = await Executor(pool, ROLES).run(_team(3, StopRule(examples=True)), "Write has_close_elements.")
    assert no_examples.answer == other and no_examples.early_stops[0]["scores"] == dict.fromkeys(("v0", "v1", "v2"))


def test_exsc_is_sc_cot_s_team_behind_the_examples_gate_for_code_only() -> None:
    team, sc = baseline_spec("exsc", "code", level="large"), baseline_spec("sc-cot", "code", level="large")
    assert team.agents[:-1] == sc.agents[:-1] and team.agents[-1].stop == StopRule(examples=True)
    assert supports("exsc", "code") and not supports("exsc", "number") and not supports("exsc", "choice")


async def test_without_a_sandbox_the_gate_is_a_one_line_error_before_any_call(data_dir: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without bubblewrap cannot run the examples: refused up front, as a logprob gate on a pool that
    cannot score is, so a run that cannot gate spends nothing; a task without examples needs no sandbox."""
    from lemon.runtime import examples_gate

    def missing() -> str:
        raise SandboxError("`bwrap` not found on PATH: code checks need it; install bubblewrap")

    monkeypatch.setattr(examples_gate, "sandbox", missing)
    item = _item(data_dir)
    pool = scripted_pool(_voters([_program(item)] * 3))
    result = await Executor(pool, ROLES).run(_team(3, StopRule(examples=True)), code_prompt(item))
    assert result.status == "error" and result.calls == 0 and "\n" not in result.stop_reason
    assert result.stop_reason == ("agent 'vote', field stop: its examples gate runs each parent's program in the "
                                  "sandbox: `bwrap` not found on PATH: code checks need it; install bubblewrap")
    no_examples = await Executor(pool, ROLES).run(_team(3, StopRule(examples=True)), "Write has_close_elements.")
    assert no_examples.status == "ok"


def _train_item(data_dir: Path, item_id: str) -> Item:
    return next(i for i in load_split("humaneval", "train", data_dir) if i.id == item_id)


def test_examples_written_in_prose_are_read_too(data_dir: Path) -> None:
    """Half of HumanEval's prompts show their examples in prose (26 of the 40 `train` items have no doctest):
    each way of writing one that the `train` prompts use, read from the real prompt."""
    def cases(item_id: str) -> tuple[tuple[str, str], ...]:
        found = task_examples(code_prompt(_train_item(data_dir, item_id)))
        return found.cases if found else ()

    assert cases("HumanEval/95")[0] == ('check_dict_case({"a":"apple", "b":"banana"})', "True")  # should return X.
    assert cases("HumanEval/126")[2] == ("is_sorted([1, 3, 2, 4, 5])", "False")  # ➞
    assert cases("HumanEval/148")[0] == ('bf("Jupiter", "Neptune")', '("Saturn", "Uranus")')  # ==>
    assert cases("HumanEval/102") == (("choose_num(12, 15)", "14"), ("choose_num(13, 12)", "-1"))  # =
    assert cases("HumanEval/98")[0] == ("count_upper('aBCdEf')", "1")  # returns
    assert cases("HumanEval/79")[0] == ("decimal_to_binary(15)", '"db1111db"')  # # returns
    assert cases("HumanEval/150") == (("x_or_y(7, 34, 12)", "34"), ("x_or_y(15, 8, 5)", "5"))  # for f(x) == y
    assert cases("HumanEval/108")[0] == ("count_nums([])", "0")  # >>> f(x) == y, nothing shown
    assert cases("HumanEval/67") == ()  # f(x) -> 19 - 5 - 6 = 8: not a value, skipped


def test_every_train_items_reference_solution_passes_the_examples_read_from_its_prompt(data_dir: Path) -> None:
    """External truth: the upstream canonical solution passes every example the gate reads, on all 31 `train`
    items it reads any from, but the two whose docstrings are wrong upstream (HumanEval/47's median of six is 8.0,
    not 15.0; HumanEval/148 writes the one-tuple ("Venus",) as ("Venus"), a string)."""
    read, failing = 0, set()
    for item in load_split("humaneval", "train", data_dir):
        found = task_examples(code_prompt(item))
        if found is None:
            continue
        read += 1
        if not passes_examples(_program(item), found):
            failing.add(item.id)
    assert read == 31 and failing == {"HumanEval/47", "HumanEval/148"}


def _task(docstring: str) -> str:
    """A task as a user poses it: `f(a, b)` returns (a + b, a * b); `docstring` holds its examples."""
    return f"Write f.\n```python\ndef f(a, b):\n    \"\"\"The sum and the product.\n{docstring}\n    \"\"\"\n```"


def _reply(body: str) -> str:
    return f"```python\ndef f(a, b):\n    {body}\n```"


RIGHT, WRONG, HALF = _reply("return a + b, a * b"), _reply("return 1"), _reply("return a + b")


@pytest.mark.parametrize(("docstring", "case"), [
    ("    >>> f(2, 3)  # small ones\n    (5, 6)", ("f(2, 3)", "(5, 6)")),  # issue 52: was `candidate(2, 3)  # ... ==`
    ("    f(2, 3) ➞ 5, 6", ("f(2, 3)", "5, 6")),  # was `assert candidate(2, 3) == 5, 6`: 6 the assert's message
    ("    f(2, 3) => (5, 6)  # both", ("f(2, 3)", "(5, 6)")),
    ("    f(2, 3) returns (5, 6).", ("f(2, 3)", "(5, 6)")),
    ("    >>> f(2, 3) == (5, 6)", ("f(2, 3)", "(5, 6)")),
    ("    >>> # small ones\n    ... f(2, 3)\n    (5, 6)", ("f(2, 3)", "(5, 6)")),  # was `candidate small ones`
    ("    >>> f(2,\n    ...   3)\n    (5,\n     6)", ("f(2,\n  3)", "(5,\n 6)")),  # several lines each
    ("    >>> (f)(2, 3)\n    (5, 6)", ("(f)(2, 3)", "(5, 6)")),  # was `candidate)(2, 3)`
    ("    >>> f(*f(1, 1))\n    (3, 2)", ("f(*f(1, 1))", "(3, 2)")),  # the inner call was the task's stub
])
def test_each_example_is_checked_as_the_call_and_value_it_parses_to_never_as_spliced_text(
        docstring: str, case: tuple[str, str]) -> None:
    """Issue 52: a doctest call with a comment was spliced into `assert candidate(2, 3)  # small ones == 5`, the
    comparison commented out, so a program answering 1 passed and was taken alone. Each way the reader accepts an
    example, run in the real sandbox: the right program passes, `return 1` and a half-right one fail."""
    found = task_examples(_task(docstring))
    assert found is not None and found.cases == (case,)
    assert passes_examples(RIGHT, found)
    assert not passes_examples(WRONG, found) and not passes_examples(HALF, found)


@pytest.mark.parametrize("docstring", [
    "    >>> f(2, 3); f(0, 0)\n    (0, 0)",  # a semicolon: two statements, not one call
    "    >>> g(2, 3)\n    (5, 6)",  # not the task's function
    "    >>> f(2, 3) or True\n    (5, 6)",
    "    f(2, 3) => (5, 6); import os",
    "    f(2, 3) == (5, 6) or True",
    "    >>> f(2, 3)\n    (5,\n    6) and more",  # a value that does not parse
    "    >>>f(2, 3)\n    (5, 6)",  # doctest cannot read it (no blank after >>>): was a ValueError, a traceback
    "    >>> f(2, 3)\n  (5, 6)",  # nor this (the value indented less than its >>>)
])
def test_what_is_not_one_call_of_the_function_and_one_value_is_not_an_example(docstring: str) -> None:
    assert task_examples(_task(docstring)) is None


async def test_a_wrong_first_program_is_not_taken_alone_when_an_example_carries_a_comment() -> None:
    """Issue 52 as `lemon run` met it: the first voter's `return 1` passed the commented-out check, 1 call."""
    task = _task("    >>> f(2, 3)  # small ones\n    (5, 6)")
    result = await Executor(scripted_pool(_voters([WRONG, RIGHT, WRONG])), ROLES).run(
        _team(3, StopRule(examples=True)), task)
    assert result.calls == 2 and result.answer == RIGHT
    assert result.early_stops[0]["scores"] == {"v0": 0, "v1": 1} and result.early_stops[0]["skipped"] == ["v2"]


UNFENCED = ("Please complete this function.\n\nfrom typing import Tuple\n\n\n"
            "def f(a: int, b: int) -> Tuple[int, int]:\n    \"\"\"The sum and the product.\n"
            "    >>> f(2, 3)\n    (5, 6)\n    \"\"\"\n\nKeep it short.")


def test_a_function_pasted_without_a_fence_is_read_as_one_in_a_fence() -> None:
    """Issue 52: the kind detector read it as code, the gate read no examples (fenced tasks only)."""
    code = task_code(UNFENCED)
    assert code == UNFENCED[UNFENCED.index("from"):UNFENCED.index("\n\nKeep")] + "\n"  # imports in, prose out
    found = task_examples(UNFENCED)
    assert found is not None and found.entry == "f" and found.cases == (("f(2, 3)", "(5, 6)"),)
    assert passes_examples(RIGHT, found) and not passes_examples(WRONG, found)
    indented = "\n".join("    " + line for line in UNFENCED.splitlines())  # pasted indented, as from an email
    assert task_code(indented) == code
    assert task_code("What is 2 + 2?") is None and task_code("```python\nprint(1)\n```") == "print(1)\n"
    assert task_code("def f(x):\n  y = (\n") == ""  # a code task, but nothing Python can read: no examples


def test_on_all_164_prompts_the_reference_solution_passes_what_is_read_but_where_the_prompt_is_wrong(
        data_dir: Path) -> None:
    """External truth on the whole of HumanEval (the reader's output is part of measured results): it reads 381
    examples from 137 prompts, as before the reader built its checks from parsed expressions (issue 52), and the
    canonical solution passes them all on every prompt but five whose examples are wrong upstream: HumanEval/47
    and /148 (above), /80 (`is_happy(a) => False`: unquoted strings), /116 (its examples sort by value, its
    solution by count of ones) and /130 (`tri(1) = 3` states the sequence, not what the function returns)."""
    read, cases, failing = 0, 0, set()
    for item in load_split("humaneval", "all", data_dir):
        found = task_examples(code_prompt(item))
        if found is None:
            continue
        read, cases = read + 1, cases + len(found.cases)
        if not passes_examples(_program(item), found):
            failing.add(item.id)
    assert (read, cases) == (137, 381)
    assert failing == {"HumanEval/47", "HumanEval/80", "HumanEval/116", "HumanEval/130", "HumanEval/148"}
