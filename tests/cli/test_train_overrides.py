"""`lemon train`'s config settings are spelled once (the config field): `--set KEY=VALUE` and the typed
shortcuts generated from the config both become dotted overrides; a bad one is a one-line error, exit 2."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from lemon.cli.train_cmds import with_config_options
from lemon.train.settings import CONFIG_OPTIONS
from tests.cli.test_cli_core import assert_clean_error, lemon


def test_shortcuts_and_set_become_dotted_overrides_in_order() -> None:
    seen: dict[str, object] = {}

    def command(out: Path, overrides: list[str] | None = None) -> None:
        seen.update(out=out, overrides=overrides)

    wrapped = with_config_options(command)
    params = inspect.signature(wrapped).parameters
    assert {"out", "overrides", *CONFIG_OPTIONS} == set(params)
    kwargs: dict[str, object] = dict.fromkeys(CONFIG_OPTIONS)
    kwargs.update(out=Path("r"), overrides=["optim.lr=3e-5"], group_size=2, gradient_checkpointing=False,
                  families="edge,role")
    wrapped(**kwargs)
    assert seen == {"out": Path("r"), "overrides": ["optim.lr=3e-5", "group.group_size=2",
                                                    "optim.gradient_checkpointing=false",
                                                    "sampler.families=edge,role"]}


@pytest.mark.parametrize(("args", "expected"), [
    (("--set", "optim.lrr=1"), "invalid training override 'optim.lrr=1'"),
    (("--lr", "-1"), "invalid training override optim.lr='-1.0'"),
    (("--set", "sampler.families=edge,nope"), "unknown families"),
])
def test_a_bad_setting_is_one_line_and_exit_2(args: tuple[str, ...], expected: str, tmp_path: Path,
                                              _isolated_home: Path) -> None:
    proc = lemon("train", "--out", str(tmp_path / "run"), *args, home=_isolated_home)
    assert_clean_error(proc, expected)
    assert not (tmp_path / "run").exists()
