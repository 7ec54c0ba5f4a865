"""SFT plumbing (teacher data given, tiny settings) and the training-curve plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings

from lemon.errors import LemonError
from lemon.runtime.executor import required_agents
from lemon.spec.model import Spec
from lemon.spec.roles import RoleLibrary
from lemon.spec.validate import validate_spec
from lemon.train.plot import draw_runs, plot_run, read_metrics
from lemon.train.sft import live_spec
from tests.spec_strategies import LEVELS, specs


@settings(max_examples=200, deadline=None)
@given(specs())
def test_sft_targets_keep_exactly_the_agents_the_runtime_runs(spec: Spec) -> None:
    live = live_spec(spec)
    assert set(live.names) == required_agents(spec)  # nothing the runtime runs is lost, nothing dead kept
    assert live.final_agent() == spec.final_agent()
    assert [a for a in spec.agents if a.name in set(live.names)] == list(live.agents)  # same agents, same order
    validate_spec(live, RoleLibrary.load(), LEVELS)  # still a valid spec
    assert live_spec(live) is live  # a live spec is returned as is


def test_plot_writes_a_png_and_rejects_bad_input(tmp_path: Path) -> None:
    rows = [{"step": s, "reward_mean": 0.1 * s, "valid_rate": 0.5, "worker_tokens": 100 + s,
             "family_prob/edge": 0.4, "cf_delta_mean/role": -0.1, "step_s": 3.0} for s in (2, 1, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    out = plot_run(tmp_path, tmp_path / "curves.png", smooth=2)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(LemonError):
        read_metrics(tmp_path / "missing")
    (tmp_path / "metrics.jsonl").write_text("{not json\n")
    with pytest.raises(LemonError, match="line 1"):
        read_metrics(tmp_path)


def test_plot_overlays_several_runs_one_colour_per_run(tmp_path: Path) -> None:
    for name, slope in (("cf", 0.2), ("global", 0.1)):
        (tmp_path / name).mkdir()
        rows = [{"step": s, "reward_mean": slope * s, "valid_rate": 1.0} for s in (1, 2, 3)]
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fig = draw_runs([tmp_path / "cf", tmp_path / "global"], smooth=1)
    reward = fig.axes[0]
    lines = {ln.get_label(): ln for ln in reward.get_lines()}
    assert set(lines) == {"cf: reward_mean", "global: reward_mean"}
    assert list(lines["cf: reward_mean"].get_ydata()) == pytest.approx([0.2, 0.4, 0.6])
    assert lines["cf: reward_mean"].get_color() != lines["global: reward_mean"].get_color()
    with pytest.raises(LemonError, match="at least one"):
        draw_runs([])


@pytest.mark.train
async def test_run_sft_with_given_examples(tmp_path: Path, policy_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lemon.orchestrator.policy_prompt import read_prompt_style
    from lemon.spec.model import Agent, Spec
    from lemon.spec.render import render_spec
    from lemon.train.sft import SFTExample, SFTSettings, run_sft
    from tests.benchdata import find_data_dir

    spec = Spec(agents=(Agent(name="solver", role="math_solver", duty="Solve it", capacity="small"),),
                output="solver")
    examples = [SFTExample(f"x{i}", f"What is {i} + 1?", render_spec(spec).text, "model", None) for i in range(2)]
    s = SFTSettings(out_dir=tmp_path / "sft", policy=str(policy_dir), n_train=2, n_eval=2, epochs=1,
                    batch_size=2, data_dir=str(find_data_dir()), max_new_tokens=16, eval_before=False,
                    prompt="terse")
    report = await run_sft(s, examples=examples)
    assert report["n_examples"] == 2 and report["n_eval"] == 2
    assert read_prompt_style(tmp_path / "sft" / "model") == "terse"  # trained on it, so asked with it
    assert 0.0 <= report["valid_rate_after"] <= 1.0 and report["valid_rate_before"] is None
    assert (tmp_path / "sft" / "model" / "config.json").is_file()
    saved = json.loads((tmp_path / "sft" / "sft.json").read_text())
    assert saved["eval_data"]["split"] == "train"
    assert not set(saved["eval_data"]["item_ids"]) & set(saved["train_data"]["item_ids"])
    assert len((tmp_path / "sft" / "sft_data.jsonl").read_text().splitlines()) == 2


def test_the_plot_has_a_curve_for_every_edit_family() -> None:
    """`level` (the default family) had no curve: the panels listed the paper's three families only."""
    from lemon.train.config import FAMILIES
    from lemon.train.plot import PANELS

    keys = {k for _, ks in PANELS for k in ks}
    assert {f"family_prob/{f}" for f in FAMILIES} | {f"cf_delta_mean/{f}" for f in FAMILIES} <= keys


def test_a_mean_over_zero_counted_tokens_is_no_point(tmp_path: Path) -> None:
    """cf_span_p is a mean over cf_span_tokens: a run whose steps had none gets no panel, not a line at 0."""
    run = tmp_path / "pairwise"
    run.mkdir()
    rows = [{"step": s, "reward_mean": 0.1 * s, "cf_span_p": 0.0, "cf_span_tokens": 0} for s in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    titles = [ax.get_title() for ax in draw_runs([run]).axes]
    assert not any("credited tokens" in t for t in titles) and any(t.startswith("reward") for t in titles)
    rows[1].update(cf_span_p=0.99, cf_span_tokens=4)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    titles = [ax.get_title() for ax in draw_runs([run]).axes]
    assert any("credited tokens" in t for t in titles)


@pytest.mark.parametrize(("teacher", "items"), [("bank", 10), ("bank-pooled", 0), ("bank-budget", 0)])
async def test_bank_items_needs_the_pooled_teacher_and_a_positive_count(tmp_path: Path, teacher: str,
                                                                        items: int) -> None:
    from lemon.train.sft import SFTSettings, run_sft

    s = SFTSettings(out_dir=tmp_path / "sft", teacher=teacher, bank_items=items)
    with pytest.raises(LemonError, match="--bank-items"):
        await run_sft(s)
    assert not (tmp_path / "sft").exists()  # refused before anything was written
