"""HumanEval: complete a Python function; graded by running the upstream tests in the sandbox.

| split | role      | size | definition                                           |
|-------|-----------|-----:|------------------------------------------------------|
| test  | eval *    |  124 | `HumanEval.jsonl.gz` minus the seeded hold-out       |
| train | train     |   40 | seeded hold-out of `HumanEval.jsonl.gz`              |
| all   | reference |  164 | the whole file (the paper's set; overlaps `train`)   |

The code answer kind is HumanEval's own: its prompt shows the signature and docstring (`item.meta["prompt"]`),
the extractor joins a body-only reply to it, and the grader runs the program against `item.meta["test"]` in two
bubblewrap sandboxes (`lemon.sandbox`), which is why `CODE.sandboxed` is set: the harness grades off the event
loop, a few at a time.
"""

from __future__ import annotations

import logging
from pathlib import Path

from lemon.benchmarks.base import AnswerKind, DataBenchmark, Item, Source
from lemon.benchmarks.files import JSONL, json_lines, row_field
from lemon.benchmarks.splits import holdout_splits
from lemon.extract import extract_code, humaneval_program
from lemon.sandbox.runner import DEFAULT_TIMEOUT_S, Limits, SandboxResult, run_check

log = logging.getLogger(__name__)

CODE_INSTRUCTION = ("Complete the Python function below. Reply with the complete function (its signature "
                    "and body, with any imports it needs) in a single ```python code block.")


def _meta(item: Item, key: str) -> str:
    """One of the HumanEval fields `_parse` keeps in `item.meta` (each checked to be text there)."""
    value = item.meta[key]
    if not isinstance(value, str):
        raise TypeError(f"HumanEval item {item.id}: its {key} is {type(value).__name__}, not text")
    return value


def code_prompt(item: Item) -> str:
    """The HumanEval prompt (signature and docstring) with the instruction to return the whole function."""
    return f"{CODE_INSTRUCTION}\n\n```python\n{_meta(item, 'prompt').rstrip()}\n```"


def code_extract(text: str, item: Item) -> str | None:
    """The function code in the reply, a body joined to the prompt (see `extract_code`)."""
    return extract_code(text, _meta(item, "entry_point"), _meta(item, "prompt"))


def run_humaneval(completion: str, item: Item, timeout_s: float = DEFAULT_TIMEOUT_S) -> SandboxResult:
    """Run a HumanEval completion (full function or body) against the item's upstream tests."""
    entry, prompt = _meta(item, "entry_point"), _meta(item, "prompt")
    program = humaneval_program(completion, prompt, entry)
    return run_check(program, prompt, _meta(item, "test"), entry, Limits(timeout_s=timeout_s))


def check_humaneval(completion_code: str, item: Item, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether `completion_code` passes the item's HumanEval tests (`check(entry_point)` returns)."""
    result = run_humaneval(completion_code, item, timeout_s)
    log.debug("%s: %s %s", item.id, result.status, result.detail[:200])
    return result.passed


def code_check(prediction: str, item: Item) -> bool:
    """Whether the code passes the item's tests in the sandbox."""
    return check_humaneval(prediction, item)


def _parse(path: Path, fmt: str) -> list[Item]:
    items = []
    for i, row in enumerate(json_lines(path, fmt)):
        where = f"line {i + 1}"
        fields = {k: row_field(row, k, str, path, where, fmt)
                  for k in ("task_id", "prompt", "canonical_solution", "test", "entry_point")}
        items.append(Item(fields["task_id"], fields["prompt"], fields["test"], meta=fields))
    return items


CODE = AnswerKind("code", code_prompt, code_extract, code_check, sandboxed=True)

HUMANEVAL = DataBenchmark(
    name="humaneval",
    answers=CODE,
    sources={"all": Source("humaneval/HumanEval.jsonl.gz", f"gzip {JSONL} of {{task_id, prompt, "
                           "canonical_solution, test, entry_point}", _parse)},
    splits=holdout_splits("HumanEval.jsonl.gz", 40, 164),
    default_split="test",
    train_split="train",
)
