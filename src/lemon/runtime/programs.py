"""Program-of-thought agents: a `program` role's reply is Python, and what the program prints is its answer.

Why: the workers are small coder models. On the first 20 GSM8K `train` items, Qwen2.5-Coder-1.5B answered as
often by writing a program as by reasoning in prose, in well under half the tokens (docs/results.md, "Program
voters"): a vote of programs costs what two prose voters cost. The code runs in the sandbox
(`lemon.sandbox.runner.run_script`: no network, no host files, a time limit), never in this process.

The agent's output is its reply followed by the program's last printed line and "The answer is X.", so every
extractor, vote and stop rule reads a program agent as it reads a prose one. When there is no code block, or
the program fails or prints nothing, the output says so in words without a number, and the reply's own
answer (if it wrote one) stands. The reply alone is what the model wrote: a logprob gate scores that.
"""

from __future__ import annotations

import asyncio
import re

from lemon.sandbox.runner import SandboxResult, run_script

#: Seconds a program may run: arithmetic for a word problem takes milliseconds; a loop that runs away is cut.
PROGRAM_TIMEOUT_S = 5.0
#: Characters of the program's last printed line kept as its answer.
MAX_ANSWER_CHARS = 200
_CODE_BLOCK = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_NOT_A_WORD = re.compile(r"[^A-Za-z ]+")


def program_code(reply: str) -> str | None:
    """The last fenced code block of `reply` (a model often explains first and writes the program last)."""
    blocks = _CODE_BLOCK.findall(reply)
    return blocks[-1] if blocks else None


def with_result(reply: str, result: SandboxResult | None) -> str:
    """The agent's output: `reply`, then what its program printed as the answer, or why there is none."""
    if result is None:
        return f"{reply}\n\n(no Python code block to run)"
    if not result.passed:  # the reason in words only: a digit in a traceback must not become an answer
        reason = _NOT_A_WORD.sub("", result.detail.split(":", 1)[0]).strip() or result.status
        return f"{reply}\n\n(the program did not finish: {reason})"
    lines = [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]
    if not lines:
        return f"{reply}\n\n(the program printed nothing)"
    last = lines[-1][:MAX_ANSWER_CHARS]  # an answer, not a flood: what later agents read stays small
    return f"{reply}\n\nProgram output: {last}\nThe answer is {last}."


async def run_reply(reply: str, timeout_s: float = PROGRAM_TIMEOUT_S) -> str:
    """Run the program in `reply` in the sandbox (in a thread: the event loop keeps serving other agents)."""
    code = program_code(reply)
    result = None if code is None else await asyncio.to_thread(run_script, code, timeout_s)
    return with_result(reply, result)
