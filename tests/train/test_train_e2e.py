"""End to end: `lemon train` for 2 steps with the real tiny pool and the real SmolLM2 policy, then --resume.

The untrained policy almost never writes a valid spec, which would leave execution and counterfactuals
untested; so the policy is first given a few seconds of SFT on canonical specs (`finetune`, the same code
`lemon sft` uses), on the terse prompt: the trainer must ask it the way it was tuned and record that in every
checkpoint and the final policy. Settings are the smallest that still exercise everything: 2 tasks, group 2,
96 tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.train, pytest.mark.models]
import torch  # noqa: E402  (the test command installs the train extra: a missing torch fails, never skips)

from lemon.spec.model import Agent, Spec  # noqa: E402
from lemon.spec.render import render_spec  # noqa: E402

TEAM = Spec(agents=(
    Agent(name="solver", role="math_solver", duty="Solve it", capacity="small"),
    Agent(name="checker", role="critic", duty="Check it", capacity="medium", depends_on=("solver",)),
), output="checker")


@pytest.fixture(scope="module")
def warm_policy(tmp_path_factory: pytest.TempPathFactory, policy_dir: Path) -> Path:
    from lemon.benchmarks.registry import BENCHMARKS, load_split
    from lemon.orchestrator.policy_prompt import write_prompt_style
    from lemon.spec.roles import RoleLibrary
    from lemon.train.policy import load_policy
    from lemon.train.sft import SFTExample, finetune
    from tests.benchdata import find_data_dir

    torch.set_num_threads(2)
    items = load_split("gsm8k", "train", find_data_dir())[:4]
    bench = BENCHMARKS["gsm8k"]
    examples = [SFTExample(it.id, bench.prompt(it), render_spec(TEAM).text, "model", None) for it in items]
    model, tok = load_policy(str(policy_dir))
    # 6 epochs, not 3: the terse prompt has no example to copy the format from
    finetune(model, tok, examples, RoleLibrary.load(), ("small", "medium", "large"), epochs=6, lr=1e-4,
             batch_size=4, seed=0, style="terse")
    out = tmp_path_factory.mktemp("warm") / "policy"
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    write_prompt_style(out, "terse")
    return out


def _train(args: list[str]) -> Any:
    from typer.testing import CliRunner

    from lemon.cli.main import app

    return CliRunner().invoke(app, ["train", *args], catch_exceptions=False)


def test_two_steps_then_resume(tmp_path: Path, warm_policy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.benchdata import find_data_dir

    monkeypatch.setenv("LEMON_DATA_DIR", str(find_data_dir()))
    run = tmp_path / "run"
    common = ["--run-dir", str(run), "--benchmark", "gsm8k", "--pool", "tiny", "--policy", str(warm_policy),
              "--limit-tasks", "2",
              "--tasks-per-step", "1", "--group-size", "2", "--max-new-tokens", "96", "--kl-beta", "0",
              "--save-every", "1", "--no-cache"]
    res = _train([*common, "--steps", "2"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert any(r["valid_rate"] > 0 for r in rows), "warm policy wrote no valid spec: execution untested"
    assert any(r["rollout_tokens"] > 0 for r in rows)
    info = json.loads((run / "run.json").read_text())
    assert info["data"]["split"] == "train" and info["data"]["definition"]["role"] == "train"
    assert len(info["data"]["item_ids"]) == 2
    ckpt = run / "checkpoints" / "step-000002"
    assert (ckpt / "COMPLETE").is_file() and (ckpt / "optimizer.pt").is_file()
    assert (run / "final" / "config.json").is_file()
    from lemon.orchestrator.policy_prompt import read_prompt_style

    assert read_prompt_style(ckpt) == read_prompt_style(run / "final") == "terse"  # asked as it was tuned

    # Starting again without --resume is refused; --resume continues from step 2 to 3.
    from typer.testing import CliRunner

    from lemon.cli.main import app

    again = CliRunner().invoke(app, ["train", *common, "--steps", "3"])
    assert again.exit_code != 0
    res = _train([*common, "--steps", "3", "--resume"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert (run / "checkpoints" / "step-000003" / "COMPLETE").is_file()
    state = json.loads((run / "checkpoints" / "step-000003" / "trainer_state.json").read_text())
    assert state["step"] == 3
