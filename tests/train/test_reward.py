"""Reward terms and the training config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemon.errors import ConfigError
from lemon.spec.model import MAX_AGENTS
from lemon.train.config import MAX_EDGES, RewardConfig, TrainConfig, load_reward_config, load_train_config
from lemon.train.reward import compute_reward, invalid_reward


@pytest.fixture()
def cfg() -> RewardConfig:
    return load_reward_config()


def test_invalid_spec_gets_penalty_only(cfg: RewardConfig) -> None:
    r = invalid_reward(cfg)
    assert r.total == cfg.invalid_penalty == -1.0
    assert r.invalid == cfg.invalid_penalty
    assert r.success == 0.0 and r.efficiency == 0.0 and r.structure == 0.0
    assert r.allows_counterfactual is False


def test_valid_spec_terms(cfg: RewardConfig) -> None:
    r = compute_reward(cfg, success=1.0, tokens=0, n_agents=3, n_edges=2)
    assert r.success == 1.0
    assert r.efficiency == pytest.approx(0.1)
    assert r.structure == pytest.approx(3 * 0.01 + 2 * 0.005)
    assert r.total == pytest.approx(1.0 + 0.1 - 0.04)
    assert r.invalid == 0.0 and r.allows_counterfactual
    half = compute_reward(cfg, success=1.0, tokens=cfg.token_ref // 2, n_agents=1, n_edges=0)
    assert half.efficiency == pytest.approx(0.05)
    over = compute_reward(cfg, success=1.0, tokens=cfg.token_ref * 3, n_agents=1, n_edges=0)
    assert over.efficiency == 0.0


def test_wrong_gets_no_success_and_gated_bonus(cfg: RewardConfig) -> None:
    r = compute_reward(cfg, success=0.0, tokens=0, n_agents=1, n_edges=0)
    assert r.success == 0.0 and r.efficiency == 0.0
    assert r.total == pytest.approx(-0.01)
    assert r.allows_counterfactual
    ungated = cfg.model_copy(update={"efficiency_requires_success": False})
    assert compute_reward(ungated, success=0.0, tokens=0, n_agents=1, n_edges=0).efficiency == pytest.approx(0.1)


def test_fractional_success_scales_success_and_gated_bonus(cfg: RewardConfig) -> None:
    """Several worker seeds per spec: the reward is linear in the fraction that was right."""
    half = compute_reward(cfg, success=0.5, tokens=0, n_agents=1, n_edges=0)
    full = compute_reward(cfg, success=1.0, tokens=0, n_agents=1, n_edges=0)
    assert half.success == pytest.approx(0.5) and half.efficiency == pytest.approx(full.efficiency / 2)


def test_default_orderings(cfg: RewardConfig) -> None:
    worst_correct = compute_reward(cfg, success=1.0, tokens=10**9, n_agents=MAX_AGENTS, n_edges=MAX_EDGES).total
    best_wrong = compute_reward(cfg.model_copy(update={"efficiency_requires_success": False}), success=0.0,
                                tokens=0, n_agents=1, n_edges=0).total
    assert worst_correct > best_wrong
    worst_valid = compute_reward(cfg, success=0.0, tokens=10**9, n_agents=MAX_AGENTS, n_edges=MAX_EDGES).total
    assert worst_valid > invalid_reward(cfg).total


def test_bad_measurements_rejected(cfg: RewardConfig) -> None:
    with pytest.raises(ValueError):
        compute_reward(cfg, success=1.0, tokens=-1, n_agents=1, n_edges=0)
    with pytest.raises(ValueError):
        compute_reward(cfg, success=1.0, tokens=1, n_agents=0, n_edges=0)
    with pytest.raises(ValueError):
        compute_reward(cfg, success=1.5, tokens=1, n_agents=1, n_edges=0)
    with pytest.raises(TypeError):  # keyword-only: positional measurements are refused
        compute_reward(cfg, 1.0, 1, 1, 0)  # type: ignore[misc]


def test_default_config_values() -> None:
    c = load_train_config()
    assert c == TrainConfig()  # the YAML and the code defaults agree
    assert c.group.group_size == 4 and c.sampler.floor == 0.1 and c.credit.cf_weight == 1.0


def test_config_errors_are_one_line(tmp_path: Path) -> None:
    cases = {
        "unknown.yaml": "reward:\n  sucess_weight: 2\n",
        "floor.yaml": "sampler:\n  floor: 0.5\n",
        "family.yaml": "sampler:\n  families: [edge, swap]\n",
        "syntax.yaml": "reward: [\n",
        "list.yaml": "- 1\n",
        "group.yaml": "group:\n  group_size: 1\n",
    }
    for name, text in cases.items():
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(ConfigError) as err:
            load_train_config(p)
        assert "\n" not in str(err.value) and name in str(err.value)
    with pytest.raises(ConfigError):
        load_train_config(tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_train_config(empty) == TrainConfig()


def test_inverted_ordering_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="lemon.train.config"):
        RewardConfig(agent_cost=0.1)
    assert "cheap wrong spec" in caplog.text


def test_the_cost_can_count_model_size_and_the_orchestrator_s_spec() -> None:
    """Issue 24: what a user pays. A 1.5B agent's token costs 1.5 B-param x tokens, a 0.135B one 0.135."""
    from lemon.runtime.executor import RunResult
    from lemon.runtime.trace import Trace
    from lemon.spec.model import Agent, Spec
    from lemon.train.config import RewardConfig
    from lemon.train.rollout import run_cost, spec_cost

    tokens = {"a": {"prompt": 60, "completion": 40, "model": "embedded:qwen2.5-coder-1.5b"},
              "b": {"prompt": 100, "completion": 100, "model": "embedded:smollm2-135m"},
              "vote": {"prompt": 0, "completion": 0, "model": "vote"}}
    run = RunResult("x", "ok", "", tokens, {}, 0.0, Trace(), {}, 0, 0)
    assert run_cost(run, RewardConfig()) == 300
    assert run_cost(run, RewardConfig(cost="param_tokens")) == pytest.approx(100 * 1.5 + 200 * 0.135)
    spec = Spec(agents=(Agent(name="a", role="math_solver", capacity="large"),), output="a")
    assert spec_cost(spec, RewardConfig()) == 0.0
    text_len = len("agents:\n  - name: a\n    role: math_solver\n    capacity: large\noutput: a\n")  # no defaults
    assert spec_cost(spec, RewardConfig(spec_chars_per_token=4.0)) == pytest.approx(text_len / 4)
    assert spec_cost(spec, RewardConfig(spec_chars_per_token=4.0, cost="param_tokens")) == \
        pytest.approx(text_len / 4 * 0.135)
