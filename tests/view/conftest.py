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

from lemon.benchmarks.registry import load_split
from lemon.evaluation.evaluate import default_split
from lemon.llm.base import ChatRequest
from lemon.llm.pool import Pool
from lemon.llm.scripted import ScriptedBackend
from tests.evalcall import evaluate_kw
from tests.evaluation.conftest import eval_pool

N_ITEMS = 6


@dataclass(frozen=True)
class Stored:
    store: Path
    good: str           # run id of `chain`, right on every item
    bad: str            # run id of `cot`, right on the even-numbered items only (regressions vs good)
    items: tuple[str, ...]
    questions: dict[str, str]
    answers: dict[str, str]     # question -> gold

    def good_pool(self) -> Pool:
        """The scripted pool the `good` run was made with (explain needs the run's own models)."""
        return eval_pool(ScriptedBackend("scripted-good", responder=_responder(self.answers, set())))


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
    common = dict(limit=N_ITEMS, seeds=1, store=store, data_dir=data_dir, level="small")
    good = asyncio.run(evaluate_kw("multiarith", "chain", pool="scripted", **common,  # type: ignore[arg-type]
                                   pool_factory=lambda: eval_pool(ScriptedBackend(
                                    "scripted-good", responder=_responder(answers, set())))))
    bad = asyncio.run(evaluate_kw("multiarith", "cot", pool="scripted", **common,  # type: ignore[arg-type]
                                  pool_factory=lambda: eval_pool(ScriptedBackend(
                                   "scripted-bad", responder=_responder(answers, wrong)))))
    return Stored(store, good.run_id, bad.run_id, tuple(str(i.id) for i in items),
                  {str(i.id): i.question for i in items}, answers)


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


DEAD_SPEC = json.dumps({"agents": [
    {"name": "solver", "role": "math_solver", "duty": "Solve it carefully.", "capacity": "small", "depends_on": []},
    {"name": "helper", "role": "analyst", "duty": "", "capacity": "medium", "depends_on": []},
    {"name": "final", "role": "final_decision_maker", "duty": "", "capacity": "large", "depends_on": ["solver"]}],
    "output": "final"})


def add_prompted_run(store: Path, data_dir: Path, limit: int = 2) -> str:
    """A `prompted` run whose (scripted) orchestrator writes a spec with a dead agent and three capacities."""
    items = list(load_split("multiarith", default_split("multiarith"), data_dir=data_dir))[:limit]
    answers = {i.question: str(i.answer) for i in items}
    plain = _responder(answers, set())

    def reply(request: ChatRequest) -> str:
        return DEAD_SPEC if request.json_schema is not None else plain(request)

    summary = asyncio.run(evaluate_kw("multiarith", "prompted", limit=limit, store=store, data_dir=data_dir,
                                      pool="scripted", level="small",
                                      pool_factory=lambda: eval_pool(ScriptedBackend("scripted-orch",
                                                                                      responder=reply))))
    return summary.run_id


def write_training_run(run_dir: Path, steps: int = 20, seed: int = 0) -> Path:
    """A real run directory of the REAL trainer (`grpo.Trainer`, counterfactuals on) on the simulated pool and
    slot policy (named test doubles of lemon.train.simulate): run.json, metrics.jsonl and samples.jsonl exactly
    as `lemon train` writes them, in a few seconds and without a model."""
    from dataclasses import asdict

    from lemon.train.run_dir import RunDir
    from lemon.train.simulate import simulated_trainer

    trainer = simulated_trainer(seed=seed, cf=True)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(trainer.settings).items()
                if k != "ablation"}
    ids = [t.id for t in trainer.tasks]
    info = {"settings": {**settings, "run_dir": str(run_dir), "pool": "simulated", "benchmark": "simulated"},
            "config": trainer.cfg.model_dump(mode="json"), "data": {"benchmark": "simulated", "item_ids": ids}}
    trainer.run = RunDir(run_dir)
    trainer.run.open(info, ids, resume=False)

    async def run() -> None:
        for k in range(1, steps + 1):
            await trainer.step(k)

    asyncio.run(run())
    return run_dir
