"""A stop rule's `examples` gate at run time: which parent, if any, wrote a program that passes the task's examples.

Why: on HumanEval (docs/results.md, "Where code teams lose the program") five independent programs rarely match
as text, so a majority vote falls to its first voter: some voter's program passed the hidden tests on 57 of 60
pairs, the vote on 50. The task brings its own verifier: the function's docstring shows examples (`>>> f(x)`,
then the value), which the user wrote. Replayed on the stored replies, drawing voters one at a time and stopping
at the first program that passes them scored 56 of 60 at 559 tokens against one programmer's 50 at 318.

The executor (`executor._Run._parents_until_stop`) runs the voter's parents one at a time; each new parent's
program runs on the examples in the sandbox, as the upstream tests are run (`lemon.sandbox.runner.run_check`:
two sandboxes, the examples' process calling the candidate through a pipe), and the first that passes is taken
alone. The examples are read from the task text alone (the last fenced code block: a function with a
docstring), so the gate needs no benchmark; a task without examples never fires it, and the parents' vote
stands. A check costs no tokens.
"""

from __future__ import annotations

import ast
import doctest
import re
from dataclasses import dataclass

from lemon.runtime.programs import program_code
from lemon.sandbox.runner import Limits, SandboxError, run_check, sandbox

#: Seconds one parent's program may take on the examples (the upstream checks allow 10 s too).
EXAMPLES_TIMEOUT_S = 10.0
_DEF = re.compile(r"^(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)


@dataclass(frozen=True)
class TaskExamples:
    """The examples a code task shows: its function (`entry`), the task's code (helpers and imports the
    examples may need) and each example as (call, expected value), both Python source."""

    entry: str
    code: str
    cases: tuple[tuple[str, str], ...]

    def test(self) -> str:
        """The examples as a `check(candidate)` function, the shape of HumanEval's upstream tests."""
        lines = [f"    assert candidate{call[len(self.entry):]} == {want}" for call, want in self.cases]
        return "def check(candidate):\n" + "\n".join(lines) + "\n"


def task_examples(task: str) -> TaskExamples | None:
    """The examples of the last function defined in the task's last code block, or None if it shows none that
    Python can read back: a call of that function and a literal value. Doctest examples (`>>> f(x)`, then the
    value; nothing shown reads as None; the docstring's closing quotes are not part of the value) when there
    are any, else examples written on one line in prose (`prose_examples`)."""
    code = program_code(task)
    names = _DEF.findall(code or "")
    if not code or not names:
        return None
    entry, cases = names[-1], []
    for example in doctest.DocTestParser().get_examples(code):
        call = example.source.strip()
        want = example.want.split('"""')[0].split("'''")[0].strip() or "None"
        if _is_call_of(call, entry) and _literal(want):
            cases.append((call, want))
        elif want == "None":  # `>>> f(x) == y` with nothing shown: the writer meant it to be True
            cases.extend(prose_examples(call, entry))
    cases = cases or prose_examples(code, entry)
    return TaskExamples(entry, code, tuple(cases)) if cases else None


#: `f(x) == y`, `f(x) ➞ y`, `f(x) => y`, `f(x) ==> y`, `f(x) -> y`, `f(x) = y`, `f(x) returns y`,
#: `f(x) should return y.`, `f(x)  # => y`, `for f(x) == y`: one example a line, the call at its start.
_PROSE = (r"^\s*(?:for\s+)?(?P<call>{entry}\(.*?\))\s*(?:#\s*)?(?:==>|=>|==|➞|->|=|returns|should\s+return)"
          r"\s*(?P<want>.+?)\s*$")


def prose_examples(code: str, entry: str) -> list[tuple[str, str]]:
    """(call, value) for each line of `code` that shows a call of `entry` and its value in prose: half of
    HumanEval's prompts write their examples so (26 of the 40 `train` items show no doctest), and a gate that
    cannot read them falls back to the vote on exactly those items. The call must parse as a call of `entry`
    and the value as a literal (a trailing full stop is not part of it); anything else, such as
    `f(x) -> 19 - 5 - 6 = 8`, is skipped."""
    line = re.compile(_PROSE.format(entry=re.escape(entry)), re.MULTILINE)
    cases = []
    for m in line.finditer(code):
        call, want = m.group("call"), m.group("want")
        want = want if _literal(want) else want.removesuffix(".").strip()
        if _is_call_of(call, entry) and _literal(want):
            cases.append((call, want))
    return cases


def _is_call_of(source: str, entry: str) -> bool:
    """Whether `source` is one Python expression: a call of `entry` (not `f(x) == y`, not `round(f(x))`)."""
    try:
        node = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry


def _literal(source: str) -> bool:
    try:
        ast.literal_eval(source)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def passes_examples(reply: str, examples: TaskExamples) -> bool:
    """Whether the reply's program (its last code block, which must define the function) passes every example.
    The task's code before the function (imports, helpers) is put before the program, as the harness does."""
    program = program_code(reply)
    if program is None or not re.search(rf"^(?:async\s+)?def\s+{re.escape(examples.entry)}\s*\(", program,
                                         re.MULTILINE):
        return False
    at = re.search(rf"^def\s+{re.escape(examples.entry)}\s*\(", examples.code, re.MULTILINE)
    header = examples.code[:at.start()] if at else ""
    return run_check(header + program, examples.code, examples.test(), examples.entry,
                     Limits(timeout_s=EXAMPLES_TIMEOUT_S)).passed


def sandbox_missing() -> str | None:
    """Why the code sandbox cannot start on this machine (one line naming the fix), or None when it can: what
    the gate needs, asked by the runtime (`sandbox_refusal`) and by the template before it picks a team."""
    try:
        sandbox()
    except SandboxError as exc:
        return str(exc)
    return None


def sandbox_refusal(voter: str) -> str | None:
    """Why `voter`'s examples gate cannot run here (one line naming the fix), or None: checked before any parent
    runs, as the logprob gate's pool is, so a run that cannot gate spends nothing."""
    if why := sandbox_missing():
        return f"agent {voter!r}, field stop: its examples gate runs each parent's program in the sandbox: {why}"
    return None
