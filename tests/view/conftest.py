"""Stores for the viewer/trace/export tests, filled by the real `evaluate` with scripted pools (no weights)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lemon.bench.datasets import load_split
from lemon.bench.evaluate import default_split, evaluate
from lemon.llm.base import ChatRequest
from lemon.llm.scripted import ScriptedBackend
from tests.bench_eval.conftest import scripted_pool

N_ITEMS = 6


@dataclass(frozen=True)
class Stored:
    store: Path
    good: str           # run id of `chain`, right on every item
    bad: str            # run id of `cot`, right on the even-numbered items only (regressions vs good)
    items: tuple[str, ...]
    questions: dict[str, str]


def _responder(answers: dict[str, str], wrong_on: set[str]):  # type: ignore[no-untyped-def]
    """The gold answer (or gold + 1 for questions in `wrong_on`), wrapped in text rich would read as markup."""

    def reply(request: ChatRequest) -> str:
        text = "\n".join(m.content for m in request.messages)
        for q, a in answers.items():
            if q in text:
                value = str(int(float(a)) + 1) if q in wrong_on else a
                return f"[bold red]not markup[/] Working it out. The answer is {value}."
        return "I do not know."

    return reply


def build_store(store: Path, data_dir: Path) -> Stored:
    items = list(load_split("multiarith", default_split("multiarith"), data_dir=data_dir))[:N_ITEMS]
    answers = {i.question: str(i.answer) for i in items}
    wrong = {i.question for k, i in enumerate(items) if k % 2 == 1}
    common = dict(limit=N_ITEMS, seeds=1, store=store, data_dir=data_dir, level="small", progress=False)
    good = asyncio.run(evaluate("multiarith", "chain", pool="scripted", **common,  # type: ignore[arg-type]
                                pool_factory=lambda: scripted_pool(ScriptedBackend(
                                    "scripted-good", responder=_responder(answers, set())))))
    bad = asyncio.run(evaluate("multiarith", "cot", pool="scripted", **common,  # type: ignore[arg-type]
                               pool_factory=lambda: scripted_pool(ScriptedBackend(
                                   "scripted-bad", responder=_responder(answers, wrong)))))
    return Stored(store, good.run_id, bad.run_id, tuple(str(i.id) for i in items),
                  {str(i.id): i.question for i in items})


@pytest.fixture
def stored(tmp_path: Path, data_dir: Path) -> Stored:
    return build_store(tmp_path / "results.sqlite", data_dir)


def lemon(*args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEMON_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "lemon.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error:"), proc.stderr
    assert expected in " ".join(proc.stderr.split()), proc.stderr


def json_out(proc: subprocess.CompletedProcess[str]) -> object:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
