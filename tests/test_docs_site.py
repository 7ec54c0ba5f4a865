"""The docs site and the README as its entry page (issue 53).

- `mkdocs build --strict` passes (a broken link or anchor, a page left out of the nav, a docstring mkdocstrings
  cannot read: any warning fails it), offline (no plugin that fetches at build time, no web font), and the
  references generated at build time hold every CLI command and every spec field.
- The README opens with exactly two commands, and the second one is, character for character, what .ci/run runs.
- The README is an entry page: at most 12 KiB, its sections in order, every relative link resolving.
- The notebook: every day's file is linked from its index, every entry's title listed there under its day,
  and the results page links the index.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml

from lemon.cli.main import app
from lemon.spec.model import Agent, Spec, StopRule

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_SECTIONS = ["## Quick start", "## Results", "## Architecture", "## Documentation"]
OFFLINE_PLUGINS = {"search", "mkdocstrings"}  # neither fetches anything while the site builds


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The site built into a temporary folder, and everything the build printed."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                             str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    printed = result.stdout + result.stderr
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{printed[-4000:]}"
    return out, printed


def test_the_site_builds_strict_without_a_warning(site: tuple[Path, str]) -> None:
    out, printed = site
    assert not re.findall(r"^WARNING\b.*", printed, re.MULTILINE)
    assert (out / "index.html").is_file() and (out / "notebook" / "index.html").is_file()


def test_the_site_builds_offline() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text("utf-8"))
    assert config["theme"]["font"] is False, "theme.font: false, or Material loads Google Fonts"
    plugins = {next(iter(p)) if isinstance(p, dict) else p for p in config.get("plugins", [])}
    assert plugins <= OFFLINE_PLUGINS, f"plugins that may fetch at build time: {plugins - OFFLINE_PLUGINS}"


def test_no_page_loads_a_web_font(site: tuple[Path, str]) -> None:
    out, _ = site
    fetching = [p.relative_to(out) for p in out.rglob("*.html")
                if re.search(r"fonts\.(googleapis|gstatic)\.com", p.read_text("utf-8"))]
    assert not fetching


def _command_paths(command: typer.main.TyperGroup, prefix: str = "lemon") -> list[str]:
    out = []
    for name, sub in getattr(command, "commands", {}).items():
        if getattr(sub, "hidden", False):
            continue
        out.append(f"{prefix} {name}")
        out += _command_paths(sub, f"{prefix} {name}")
    return out


def test_the_cli_reference_has_every_command(site: tuple[Path, str]) -> None:
    out, _ = site
    html = (out / "reference" / "cli" / "index.html").read_text("utf-8")
    commands = _command_paths(typer.main.get_command(app))
    assert len(commands) > 20
    assert [c for c in commands if f"<code>{c}</code>" not in html] == []


def test_the_spec_reference_has_every_field(site: tuple[Path, str]) -> None:
    out, _ = site
    html = (out / "reference" / "spec" / "index.html").read_text("utf-8")
    fields = [*Spec.model_fields, *Agent.model_fields, *StopRule.model_fields]
    assert [f for f in fields if f"<code>{f}</code>" not in html] == []


def test_the_api_page_documents_the_runtime_and_the_spec(site: tuple[Path, str]) -> None:
    out, _ = site
    html = (out / "api" / "index.html").read_text("utf-8")
    for name in ["lemon.runtime.Executor", "lemon.runtime.RunResult", "lemon.spec.model.Spec",
                 "lemon.spec.parse.parse_spec"]:
        assert f'id="{name}"' in html, name


def readme_commands(text: str) -> dict[str, str]:
    """The README's opening code block as its numbered commands: `# N.` header comments, then the command
    (its lines, with the comment lines inside its `&&` chain) up to the next header."""
    block = re.match(r"# [^\n]*\n\n```bash\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert block, "the README must open with its commands, in a bash block right under the title"
    commands: dict[str, list[str]] = {}
    current = ""
    for line in block.group(1).splitlines():
        header = re.match(r"# (\d+)\.", line)
        if header:
            current = header.group(1)
            commands[current] = []
        elif commands.get(current) or (line and not line.startswith("#")):
            commands[current].append(line)
    return {n: "\n".join(lines).strip() for n, lines in commands.items()}


def test_the_readme_opens_with_two_commands_the_second_is_ci() -> None:
    commands = readme_commands(README.read_text("utf-8"))
    assert list(commands) == ["1", "2"]
    assert "lemon run " in commands["1"] and commands["2"].endswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    assert ci.rstrip().endswith(commands["2"]), ".ci/run must run exactly the README's command 2"
    assert subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")]).returncode == 0


def test_readme_commands_parser_can_fail() -> None:
    one = "# T\n\n```bash\n# 1. use\nlemon run x\n```\n"
    assert readme_commands(one) == {"1": "lemon run x"}
    three = "# T\n\n```bash\n# 1. a\nx &&\n  # why\n  y\n# 2. b\nz\n# 3. c\nw\n```\n"
    assert readme_commands(three) == {"1": "x &&\n  # why\n  y", "2": "z", "3": "w"}


def test_the_readme_is_an_entry_page() -> None:
    text = README.read_text("utf-8")
    assert len(text.encode("utf-8")) <= 12 * 1024, "the README is an entry page; move detail to docs/"
    at = [text.find(s) for s in README_SECTIONS]
    assert -1 not in at and at == sorted(at), f"sections, in this order: {README_SECTIONS}"
    links = re.findall(r"\]\((?!https?://|#)([^)#]+)(?:#[^)]*)?\)", text)
    assert links and [link for link in links if not (ROOT / link).exists()] == []


def test_every_notebook_day_is_linked() -> None:
    notebook = ROOT / "docs" / "notebook"
    index = (notebook / "index.md").read_text("utf-8")
    days = sorted(p.name for p in notebook.glob("????-??-??.md"))
    assert days and [d for d in days if f"]({d})" not in index] == []
    assert "](notebook/index.md)" in (ROOT / "docs" / "results.md").read_text("utf-8")


def test_every_notebook_entry_is_listed_under_its_day() -> None:
    """Entries are cited by title and found from the index: an entry missing there is lost to a reader."""
    notebook = ROOT / "docs" / "notebook"
    index = (notebook / "index.md").read_text("utf-8")
    sections = dict(re.findall(r"^## \[(\d{4}-\d\d-\d\d)\]\(\1\.md\)\n(.*?)(?=^## |\Z)", index, re.M | re.S))
    missing = [f"{day.name}: {title}" for day in sorted(notebook.glob("????-??-??.md"))
               for title in re.findall(r"^## (.+)$", day.read_text("utf-8"), re.M)
               if not re.search(rf"^- \*?{re.escape(title)}\*?$", sections.get(day.stem, ""), re.M)]
    assert sections and missing == []
