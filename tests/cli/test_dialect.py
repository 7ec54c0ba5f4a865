"""One dialect (issue 14, item 8): every command spells a shared option the same way, with the same default,
the help is clean, old spellings still work with a notice, and `--version` exists."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from lemon.cli.main import app
from lemon.cli.options import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_POOL,
    DEFAULT_TEMPERATURE,
    RENAMED,
    SHARED,
    TAKES,
    renamed_args,
)

REPO = Path(__file__).resolve().parents[2]


def _commands() -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (path, click command) of the app, groups included, depth first."""
    root = typer.main.get_command(app)
    stack: list[tuple[tuple[str, ...], Any]] = [((), root)]
    while stack:
        path, cmd = stack.pop()
        yield path, cmd
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            stack.append(((*path, name), sub))


def _options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if getattr(p, "param_type_name", "") == "option"]


def test_every_command_spells_a_shared_option_the_same_way() -> None:
    canonical = {flag: name for name, s in SHARED.items() for flag in s.flag.split("/")}  # on/off: two flags
    seen: dict[str, set[str]] = {}
    for path, cmd in _commands():
        where = " ".join(("lemon", *path))
        for p in _options(cmd):
            flags = set(p.opts) | set(p.secondary_opts)
            if p.name in SHARED:
                spelled = "/".join(p.opts + p.secondary_opts)
                assert spelled == SHARED[p.name].flag, f"{where}: {p.name} spelled {spelled}"
                seen.setdefault(p.name, set()).add(where)
            for flag in flags:
                assert canonical.get(flag, p.name) == p.name, f"{where}: {flag} means {p.name}, not {canonical[flag]}"
                assert flag not in RENAMED, f"{where}: {flag} is an old spelling; use {RENAMED.get(flag)}"
            if p.name == "pool":
                assert p.default == DEFAULT_POOL, f"{where}: --pool defaults to {p.default}"
            if p.name == "max_tokens":  # eval's None: the benchmark's own limit, else DEFAULT_MAX_TOKENS
                expected = None if where == "lemon eval" else DEFAULT_MAX_TOKENS
                assert p.default == expected, f"{where}: --max-tokens defaults to {p.default}"
            if p.name == "temperature":
                assert p.default == DEFAULT_TEMPERATURE, f"{where}: --temperature defaults to {p.default}"
    # The commands that have the idea have the option.
    assert {"lemon run", "lemon exec", "lemon eval"} <= seen["temperature"]
    assert {"lemon run", "lemon exec", "lemon eval"} <= seen["model"] and seen["model"] == seen["base_url"]
    assert {"lemon eval", "lemon train", "lemon sft"} <= seen["limit"]
    assert {"lemon train", "lemon sft"} <= seen["policy_max_tokens"]
    assert {"lemon eval", "lemon train", "lemon sft"} <= seen["threads"]  # issue 25: eval refused --threads
    assert {"lemon eval", "lemon train", "lemon sft"} <= seen["serve_workers"]  # issue 25: eval had none
    assert {"lemon run", "lemon exec", "lemon eval", "lemon explain", "lemon train", "lemon sft"} <= seen["no_cache"]


def test_every_command_takes_the_shared_options_of_the_table() -> None:
    """The dialect's table (options.TAKES): each shared option is accepted by every command it makes sense for
    (issue 23: eval refused --threads, --out and --seed) and by no command the table does not name."""
    have = {" ".join(path): {p.name for p in _options(cmd)} for path, cmd in _commands() if path}
    assert set(TAKES) == set(SHARED)
    for name, where in TAKES.items():
        assert where <= set(have), f"--{name}: the table names commands that do not exist: {sorted(where - set(have))}"
        for command, options in sorted(have.items()):
            if command in where:
                assert name in options, f"lemon {command} does not take {SHARED[name].flag}"
            else:
                assert name not in options, f"lemon {command} takes {SHARED[name].flag}; add it to options.TAKES"


def test_out_is_a_folder_for_every_command() -> None:
    """`--out` names a folder everywhere; a command that writes one file names it with --file (or a positional)."""
    for path, cmd in _commands():
        for p in _options(cmd):
            if p.name == "out":
                said = (p.help or "").lower()
                assert "folder" in said or "directory" in said, f"lemon {' '.join(path)}: --out is a file: {p.help}"


def test_the_cli_defaults_are_the_librarys() -> None:
    from lemon.cli.bench_cmds import _METHOD_HELP
    from lemon.evaluation.item import DEFAULT_TEMPERATURE as EVAL_TEMPERATURE
    from lemon.evaluation.methods import method_names

    assert DEFAULT_TEMPERATURE == EVAL_TEMPERATURE
    assert all(m.split(":")[0] in _METHOD_HELP for m in method_names()), "the --method help lists every method"


@pytest.mark.parametrize("path", [p for p, _ in _commands()], ids=lambda p: " ".join(p) or "lemon")
def test_help_shows_no_type_after_a_flag_and_no_braces(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output
    usage = next(line for line in res.output.splitlines() if "Usage:" in line)
    assert "{" not in usage and "}" not in usage, usage


def test_version() -> None:
    from lemon import __version__

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"lemon {__version__}"


def test_old_spellings_are_rewritten_with_one_notice_each() -> None:
    from rich.console import Console

    console = Console(record=True, width=200)
    args = ["--limit-tasks", "2", "--max-new-tokens=96", "--run-dir", "r", "--", "--n-train"]
    assert renamed_args(args, console) == ["--limit", "2", "--policy-max-tokens=96", "--out", "r", "--",
                                           "--n-train"]
    notices = console.export_text().splitlines()
    assert len(notices) == 3 and notices[0] == "note: --limit-tasks is now --limit (the old spelling will be removed)"


def test_the_experiment_scripts_use_the_one_spelling() -> None:
    old = re.compile("|".join(re.escape(flag) + r"\b" for flag in RENAMED))
    for script in sorted((REPO / "experiments").glob("*.sh")):
        hits = old.findall(script.read_text())
        assert not hits, f"{script.name} uses {hits}"


def test_an_old_spelling_still_runs_a_command(tmp_path: Path, _isolated_home: Path) -> None:
    """Scripts written for `--trace-dir` keep working: same effect as `--out`, and one notice on stderr."""
    from tests.cli.test_cli_core import GOOD, _scripted_pool, lemon

    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    traces = tmp_path / "traces"
    proc = lemon("exec", str(spec), "2+2?", "--pool", str(_scripted_pool(tmp_path)), "--trace-dir", str(traces),
                 home=_isolated_home)
    assert proc.returncode == 0, proc.stderr
    assert len(list(traces.glob("trace-*.json"))) == 1
    assert proc.stderr.count("note: --trace-dir is now --out") == 1
