"""A stop rule's `examples` gate at run time: which parent, if any, wrote a program that passes the task's examples.

Why: on HumanEval (docs/results.md, "Where code teams lose the program") five independent programs rarely match
as text, so a majority vote falls to its first voter: some voter's program passed the hidden tests on 57 of 60
pairs, the vote on 50. The task brings its own verifier: the function's docstring shows examples (`>>> f(x)`,
then the value), which the user wrote. Replayed on the stored replies, drawing voters one at a time and stopping
at the first program that passes them scored 56 of 60 at 559 tokens against one programmer's 50 at 318.

The executor (`executor._Run._parents_until_stop`) runs the voter's parents one at a time; each new parent's
program runs on the examples in the sandbox, as the upstream tests are run (`lemon.sandbox.runner.run_check`:
two sandboxes, the examples' process calling the candidate through a pipe), and the first that passes is taken
alone. The examples are read from the task text alone (its code, fenced or pasted without a fence, as
`task_code` reads it for the template too: a function with a docstring), so the gate needs no benchmark; a task
without examples never fires it, and the parents' vote stands. A check costs no tokens. Each check is built from
the parsed call and value (`TaskExamples.test`), never by joining text a user wrote.
"""

from __future__ import annotations

import ast
import doctest
import re
import textwrap
from dataclasses import dataclass

from lemon.runtime.programs import program_code
from lemon.sandbox.runner import Limits, SandboxError, run_check, sandbox

#: Seconds one parent's program may take on the examples (the upstream checks allow 10 s too).
EXAMPLES_TIMEOUT_S = 10.0
_DEF = re.compile(r"^(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)


@dataclass(frozen=True)
class TaskExamples:
    """The examples a code task shows: its function (`entry`), the task's code (helpers and imports the
    examples may need) and each example as (call, expected value), both Python source as the task wrote them
    (comments left out): each one expression, a call of `entry` and a literal value."""

    entry: str
    code: str
    cases: tuple[tuple[str, str], ...]

    def test(self) -> str:
        """The examples as a `check(candidate)` function, the shape of HumanEval's upstream tests. Each check is
        built from the parsed call and value, never by joining their text: a call written `f(2, 3)  # small`
        once became `assert candidate(2, 3)  # small == 5`, its comparison commented out, which any program
        passed; a value written `3, 1` became an assert whose message was 1."""
        lines = []
        for call, want in self.cases:
            check = ast.Assert(test=ast.Compare(left=_as_candidate(call, self.entry), ops=[ast.Eq()],
                                                comparators=[ast.parse(want, mode="eval").body]))
            lines.append("    " + ast.unparse(check))
        return "def check(candidate):\n" + "\n".join(lines) + "\n"


def _as_candidate(call: str, entry: str) -> ast.expr:
    """`call` (a call of `entry`) with every use of `entry` in it calling `candidate` instead."""
    node = ast.parse(call, mode="eval").body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry):
        raise ValueError(f"not a call of {entry}: {call!r}")
    for name in ast.walk(node):
        if isinstance(name, ast.Name) and name.id == entry:
            name.id = "candidate"
    return node


#: A code task, as the template's kind reads it: a ```python fence, or a one-line `def` signature.
_SIGNATURE = re.compile(r"^\s*def \w+\(.*\)\s*(->.*)?:\s*$", re.MULTILINE)
_PYTHON_FENCE = "```python"
#: A line that may open the code above a pasted function: an import, a decorator.
_PREAMBLE = re.compile(r"^(?:from\s+[\w.]+\s+import\b|import\s+\w|@\w)")


def task_code(task: str) -> str | None:
    """The code a code task shows, or None when `task` is not a code task: the one reader of a code task, which
    the template's answer kind (`task_kind`) and the examples gate both call. A task is code when it has a
    ```python fence or a line that is a function's signature; its code is its last fenced block, else (a
    function pasted without a fence) the lines from the first signature (with the imports and decorators just
    above it) to the end of the last function's body, or "" when no function can be read from it."""
    if _PYTHON_FENCE not in task and not _SIGNATURE.search(task):
        return None
    fenced = program_code(task)
    return fenced if fenced is not None else _unfenced_code(task)


def _unfenced_code(task: str) -> str:
    """The functions of a task that shows them without a fence (see `task_code`); "" if they do not parse as
    Python, first from the first signature, then the last function alone."""
    lines = task.splitlines()
    defs = [i for i, line in enumerate(lines) if _SIGNATURE.match(line)]
    if not defs:
        return ""
    end = _body_end(lines, defs[-1])
    for first in dict.fromkeys((defs[0], defs[-1])):
        while first > 0 and (_PREAMBLE.match(lines[first - 1].lstrip()) or not lines[first - 1].strip()):
            first -= 1
        code = textwrap.dedent("\n".join(lines[first:end])).strip("\n")
        if _expression(code, mode="exec") is not None:
            return code + "\n"
    return ""


def _body_end(lines: list[str], at: int) -> int:
    """The index after the last line of the function whose signature is `lines[at]`: the lines below it that
    are blank or indented deeper than it (prose after the function is not its code)."""
    indent = len(lines[at]) - len(lines[at].lstrip())
    end = last = at + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
        last = end if lines[end - 1].strip() else last
    return last


def task_examples(task: str) -> TaskExamples | None:
    """The examples of the last function defined in the task's code (`task_code`), or None if it shows none
    that Python can read back: a call of that function and a literal value. Doctest examples (`>>> f(x)`, then
    the value; nothing shown reads as None; the docstring's closing quotes are not part of the value) when
    there are any, else examples written on one line in prose (`prose_examples`)."""
    code = task_code(task)
    names = _DEF.findall(code or "")
    if not code or not names or _expression(code, mode="exec") is None:
        return None
    entry, cases = names[-1], []
    for source, want in _doctests(code):
        want = want.split('"""')[0].split("'''")[0].strip() or "None"
        if case := _case(source, want, entry):
            cases.append(case)
        elif want == "None":  # `>>> f(x) == y` with nothing shown: the writer meant it to be True
            cases.extend(prose_examples(source, entry))
    cases = cases or prose_examples(code, entry)
    return TaskExamples(entry, code, tuple(cases)) if cases else None


def _doctests(code: str) -> list[tuple[str, str]]:
    """(source, shown value) of each doctest example in `code`; none when doctest cannot read it (a value
    indented less than its `>>>`, a `>>>` without its blank): the examples are then read from prose."""
    try:
        return [(e.source.strip(), e.want) for e in doctest.DocTestParser().get_examples(code)]
    except ValueError:
        return []


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
        shown = _expression(want)
        want = want if shown is not None and _literal(shown) else want.removesuffix(".").strip()
        if case := _case(call, want, entry):
            cases.append(case)
    return cases


def _case(call: str, want: str, entry: str) -> tuple[str, str] | None:
    """(call, value) as written without comments, when `call` is one Python expression that calls `entry` (not
    `f(x) == y`, not `round(f(x))`, not `g(x)`) and `want` one literal value; else None."""
    call_node, want_node = _expression(call), _expression(want)
    if not (isinstance(call_node, ast.Call) and isinstance(call_node.func, ast.Name) and call_node.func.id == entry):
        return None
    if want_node is None or not _literal(want_node):
        return None
    return ast.get_source_segment(call, call_node) or call, ast.get_source_segment(want, want_node) or want


def _expression(source: str, mode: str = "eval") -> ast.AST | None:
    """`source` parsed as one Python expression (its node) or, with mode "exec", a module; None if it is not."""
    try:
        tree = ast.parse(source, mode=mode)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return tree.body if isinstance(tree, ast.Expression) else tree


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
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
