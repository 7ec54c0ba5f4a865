"""Trainer pieces without a full run: batch building (span -> tokens), checkpoints, task order, overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.train
import torch  # noqa: E402  (installed by the test command: missing fails, never skips)

from lemon.errors import LemonError  # noqa: E402
from lemon.spec.model import Agent, Spec  # noqa: E402
from lemon.spec.render import FieldRef, render_spec  # noqa: E402
from lemon.train.batch import build_batch, task_indices  # noqa: E402
from lemon.train.config import CreditConfig, RewardConfig, TrainConfig  # noqa: E402
from lemon.train.generation import Completion  # noqa: E402
from lemon.train.grpo import Trainer  # noqa: E402
from lemon.train.reward import compute_reward  # noqa: E402
from lemon.train.rollout import Counterfactual, GroupResult, Sample  # noqa: E402
from lemon.train.run_dir import RunDir  # noqa: E402
from lemon.train.sampler import AdaptiveFamilySampler  # noqa: E402
from lemon.train.settings import TrainSettings, effective_config  # noqa: E402
from lemon.train.token_spans import offsets_from_token_ids  # noqa: E402

SPEC = Spec(agents=(
    Agent(name="solver", role="math_solver", duty="Solve it carefully", capacity="medium"),
    Agent(name="checker", role="critic", duty="Check the solver", capacity="large", depends_on=("solver",)),
), output="checker")


def _sample(text: str, at: int, cf: Counterfactual | None, total: float) -> Sample:
    r = compute_reward(RewardConfig(), success=1.0, tokens=100, n_agents=2, n_edges=1)
    s = Sample(completion=text, valid=True, spec=SPEC, canonical_at=at, cf=cf)
    s.reward = type(r)(total, r.success, r.efficiency, r.structure, r.invalid, True)
    return s


def test_build_batch_puts_delta_on_exactly_the_field_tokens(tokenizer: Any) -> None:
    prefix = "Team:\n"
    text = prefix + render_spec(SPEC).text
    ids = [*list(tokenizer(text, add_special_tokens=False)["input_ids"]), tokenizer.eos_token_id]
    decoded, offsets = offsets_from_token_ids(tokenizer, ids[:-1])
    assert decoded == text
    ref = FieldRef("duty", "checker")
    span = render_spec(SPEC).spans[ref]
    cf = Counterfactual("role", ref, len(prefix) + span.start, len(prefix) + span.end, delta=0.8,
                        edited_reward=0.1, spent_tokens=10, estimated_tokens=10, cache_hits=1, calls=1)
    comp = Completion([1, 2, 3], ids, text, offsets, stopped=True)
    other = Completion([1, 2, 3], ids, text, offsets, stopped=True)
    group = GroupResult("t", [_sample(text, len(prefix), cf, 1.0), _sample(text, len(prefix), None, 0.0)])
    batch = build_batch([group], [[comp, other]], CreditConfig(cf_weight=0.5))
    assert batch.advantages[0] > 0 > batch.advantages[1]
    (term,) = batch.cf_terms[0]
    assert batch.cf_terms[1] == []
    assert term.delta == 0.8 and term.weight == 0.5
    assert "Check the solver" in tokenizer.decode([ids[i] for i in term.token_indices])
    assert max(term.token_indices) < len(ids) - 1  # never the EOS
    # no token outside the set covers a character of the field
    for i, (s, e) in enumerate(offsets):
        if i not in term.token_indices:
            assert e <= cf.char_start or s >= cf.char_end


def test_checkpoint_is_atomic_and_keeps_the_newest(tmp_path: Path) -> None:
    class TinyPolicy:
        pad_id = 0

        def __init__(self) -> None:
            self.model = torch.nn.Linear(3, 3)

        def save(self, target: Path) -> None:
            torch.save(self.model.state_dict(), target / "w.pt")

    policy = TinyPolicy()
    opt = torch.optim.AdamW(policy.model.parameters(), lr=0.1)
    policy.model(torch.ones(3)).sum().backward()
    opt.step()
    sampler = AdaptiveFamilySampler(seed=3)
    sampler.update("edge", 0.5)
    run = RunDir(tmp_path)
    trainer = Trainer(TrainSettings(run_dir=tmp_path, keep_checkpoints=2), effective_config(
        TrainSettings(run_dir=tmp_path)), policy, None, None, [], opt, sampler, run=run)  # type: ignore[arg-type]
    for step in (1, 2, 3):
        trainer.save(step)
    assert [s for s, _ in run.checkpoints()] == [2, 3]
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    last = run.checkpoints()[-1][1]
    restored = AdaptiveFamilySampler(seed=99)
    opt2 = torch.optim.AdamW(torch.nn.Linear(3, 3).parameters(), lr=0.1)
    resumed = Trainer(trainer.settings, trainer.cfg, policy, None, None, [], opt2, restored)  # type: ignore[arg-type]
    assert resumed.restore(last) == 4
    assert restored.probabilities() == sampler.probabilities()
    assert restored.sample(["edge", "role", "level"]) == sampler.sample(["edge", "role", "level"])
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    # a half-written checkpoint (no COMPLETE marker) is never picked up
    (tmp_path / "checkpoints" / "step-000009").mkdir()
    assert run.checkpoints()[-1][0] == 3


def test_task_order_is_a_permutation_per_epoch_and_reproducible() -> None:
    seen = [task_indices(step, 5, 1, seed=7)[0] for step in range(1, 6)]
    assert sorted(seen) == list(range(5))
    assert [task_indices(s, 5, 2, 7) for s in (1, 2)] == [task_indices(s, 5, 2, 7) for s in (1, 2)]


def _config(tmp_path: Path, *overrides: str) -> TrainConfig:
    return effective_config(TrainSettings(run_dir=tmp_path, overrides=overrides))


def test_overrides_are_validated(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "group.group_size=2", "credit.kl_beta=0.0", "sampler.families=edge,role")
    assert cfg.group.group_size == 2 and cfg.credit.kl_beta == 0.0 and cfg.sampler.families == ("edge", "role")
    assert not cfg.sampler.confidence_discount
    assert _config(tmp_path, "sampler.confidence_discount=true").sampler.confidence_discount
    assert _config(tmp_path, "credit.cf_form=pairwise").credit.cf_form == "pairwise"
    from lemon.errors import ConfigError

    with pytest.raises(ConfigError, match="cf_form"):
        _config(tmp_path, "credit.cf_form=token")

    with pytest.raises(ConfigError):
        _config(tmp_path, "group.group_size=1")
    scaled = _config(tmp_path, "optim.epochs=3", "optim.precision=bf16", "optim.gradient_checkpointing=true")
    assert (scaled.optim.epochs, scaled.optim.precision, scaled.optim.gradient_checkpointing) == (3, "bf16", True)
    # one line naming the field and the value (it used to end with pydantic's docs link only)
    with pytest.raises(ConfigError, match=r"^invalid training override optim\.precision='fp16': Input should be"):
        _config(tmp_path, "optim.precision=fp16")


def test_a_bad_override_key_is_one_line_naming_the_keys(tmp_path: Path) -> None:
    from lemon.errors import ConfigError

    for bad in ("optim.lrr=1", "nosection.lr=1", "optim.lr", "lr=1"):
        with pytest.raises(ConfigError, match=r"^invalid training override .*optim\.") as info:
            _config(tmp_path, bad)
        assert "\n" not in str(info.value)
    assert _config(tmp_path, "credit.cf_budget=none", "optim.lr=2e-5").credit.cf_budget is None


def test_a_run_stopped_before_its_first_checkpoint_resumes_from_step_one(tmp_path: Path) -> None:
    """It used to refuse both ways: without --resume the directory 'already holds a run', with it there was
    'no complete checkpoint', so a run killed in its first steps could only be deleted by hand."""
    run = RunDir(tmp_path)
    info = {"data": {"item_ids": ["a", "b"]}}
    assert run.open(info, ["a", "b"], resume=False) is None
    run.append(run.metrics_path, [{"step": 1}, {"step": 2}])
    with pytest.raises(LemonError, match="already holds a run; pass --resume to continue it or choose another --out"):
        run.open(info, ["a", "b"], resume=False)
    assert run.open(info, ["a", "b"], resume=True) is None
    assert run.metrics_path.read_text(encoding="utf-8") == ""
    with pytest.raises(LemonError, match="training items differ"):
        run.open(info, ["a", "c"], resume=True)
    with pytest.raises(LemonError, match="holds no run"):
        RunDir(tmp_path / "empty").open(info, ["a"], resume=True)
