"""A new edit family is one new file plus one registry line: a copy of the package gets a toy family that way,
and the trainer's real planner (the rollout's plan and run phases) draws, applies and describes it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lemon

REPO = Path(__file__).resolve().parents[2]

TOY = '''"""`shout` (a toy): one agent's duty in capitals."""

from __future__ import annotations

import random
from collections.abc import Sequence

from lemon.spec.edits.base import Edit, EditFamily, Family, FieldEdits, make_edit
from lemon.spec.model import Agent, Spec
from lemon.spec.render import FieldKind, FieldRef


class ShoutFamily(FieldEdits):
    name: Family = "shout"
    kind: FieldKind = "duty"

    def fields(self, spec: Spec, levels: Sequence[str]) -> list[FieldRef]:
        return [FieldRef("duty", a.name) for a in spec.agents if a.duty and a.duty != a.duty.upper()]

    def apply(self, spec: Spec, ref: FieldRef, levels: Sequence[str], rng: random.Random | None = None) -> Edit:
        return make_edit(spec, "shout", ref, duty=spec.agent(ref.agent).duty.upper())

    def describe(self, spec: Spec, edited: Spec, ref: FieldRef) -> str:
        return f"shout the duty of {ref.agent}: {edited.agent(ref.agent).duty}"

    def value(self, spec: Spec, ref: FieldRef) -> str | None:
        return agent.duty


FAMILIES: tuple[EditFamily, ...] = (ShoutFamily(),)
'''

CHILD = '''
import asyncio, json, random
from lemon.llm.base import ChatRequest, GenParams
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor
from lemon.spec.edits import ALL_FAMILIES, FIELD_FAMILIES
from lemon.spec.model import Agent, Spec
from lemon.spec.render import render_spec
from lemon.spec.roles import RoleLibrary
from lemon.train.config import RewardConfig
from lemon.train.rollout import RolloutSettings, rollout_group
from lemon.train.sampler import AdaptiveFamilySampler
from lemon.train.tasks import TrainTask
from tests.pools import LEVELS, pool_of

def reply(req: ChatRequest) -> str:
    return "The answer is 7" if "SOLVE" in req.messages[0].content else "The answer is 42"

spec = Spec(agents=(Agent(name="solver", role="math_solver", duty="Solve it", capacity="medium"),), output="solver")
ex = Executor(pool_of({lv: ScriptedBackend(f"m-{lv}", responder=reply) for lv in LEVELS},
                      defaults=GenParams(max_tokens=16)), RoleLibrary.load())
task = TrainTask(id="t/1", prompt="6 * 7?", grade=lambda text: "42" in text)
text = render_spec(spec).text
group = asyncio.run(rollout_group(ex, task, [text], roles=RoleLibrary.load(),
                                  settings=RolloutSettings(reward=RewardConfig(), cf_budget=None),
                                  sampler=AdaptiveFamilySampler(("shout",)), rng=random.Random(0)))
cf = group.samples[0].cf
print(json.dumps({"all": list(ALL_FAMILIES), "field": list(FIELD_FAMILIES), "family": cf.family,
                  "words": cf.words, "value": cf.edited_value, "span": text[cf.char_start:cf.char_end],
                  "delta": cf.delta}))
'''


def _with_toy(tmp: Path) -> Path:
    """A copy of the package with the toy family: one new file and one new line in the registry."""
    root = tmp / "src"
    shutil.copytree(Path(lemon.__file__).parent, root / "lemon", ignore=shutil.ignore_patterns("__pycache__"))
    edits = root / "lemon" / "spec" / "edits"
    (edits / "shout.py").write_text(TOY, encoding="utf-8")
    registry = edits / "__init__.py"
    before = registry.read_text(encoding="utf-8")
    after = before.replace('",\n)\n', '",\n    "shout",\n)\n', 1)  # the registry's last line
    assert len(after.splitlines()) == len(before.splitlines()) + 1
    registry.write_text(after, encoding="utf-8")
    return root


def test_a_toy_family_in_one_file_and_one_line_is_planned_applied_and_described(tmp_path: Path) -> None:
    root = _with_toy(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["all"][-1] == "shout" and "shout" not in got["field"]  # drawn by a trainer, not a kind's owner
    assert got["family"] == "shout" and got["value"] == "SOLVE IT" and got["span"] == "Solve it"
    assert got["words"] == "shout the duty of solver: SOLVE IT"
    assert got["delta"] > 0.5  # the shouted duty answers wrong: the original duty was worth the success


def test_the_installed_package_has_no_toy() -> None:
    from lemon.spec.edits import ALL_FAMILIES

    assert "shout" not in ALL_FAMILIES
