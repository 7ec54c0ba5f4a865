"""Ctrl-C at any point of a `lemon` command, from its first import on, is one line and exit code 130 (issue 52).

The command runs as the installed `lemon` script does: the entry point that pyproject.toml's `[project.scripts]`
names, called as a console script calls it. `-X importtime` makes the child write a line as each module finishes
importing, so the test sends SIGINT at chosen points of the start-up (a real `lemon run` imports for about a second
before any handler of ours used to exist) and then, once the child falls silent, while it waits on its worker: a
scripted pool (a test double) whose calls take an hour.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

POOL = ("name: slow\nlevels:\n  - {name: small, backend: scripted, model: s, latency_s: 3600}\n"
        "  - {name: medium, backend: scripted, model: m, latency_s: 3600}\n"
        "  - {name: large, backend: scripted, model: l, latency_s: 3600}\n")
TRIES = 20
SILENCE_S = 3.0  # no import for this long once the entry point runs: the child is waiting on its worker
ENTRY_PACKAGE = "lemon.cli"  # the entry point's package: from its first import on, the entry point runs


def _console_script() -> str:
    """What pip's console script for `lemon` runs: import the entry point's module, then call it."""
    data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text("utf-8"))
    module, _, func = data["project"]["scripts"]["lemon"].partition(":")
    return f"import sys\nfrom {module} import {func}\nsys.exit({func}())"


def _start(pool: Path, home: Path) -> tuple[subprocess.Popen[str], queue.Queue[str | None]]:
    env = {**os.environ, "LEMON_HOME": str(home), "COLUMNS": "160"}
    child = subprocess.Popen([sys.executable, "-X", "importtime", "-c", _console_script(), "run",
                              "What is 2 + 2?", "--pool", str(pool)], env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return child, lines


def _interrupt_after(child: subprocess.Popen[str], lines: queue.Queue[str | None],
                     imports: int | None) -> tuple[int, list[str], int]:
    """SIGINT once `imports` modules have been imported since the entry point's package (None: once the child
    falls silent); its exit code, the stderr lines that are not import timings, and how many such imports came
    before the signal. Before that package the interpreter starts and imports `lemon` itself: Python's own
    start-up, which no entry point can reach."""
    seen, said, entered = 0, [], False
    while imports is None or seen < imports:
        try:  # silence counts only once the entry point runs: a loaded machine may start Python slowly
            line = lines.get(timeout=SILENCE_S if entered else 120)
        except queue.Empty:
            break
        assert line is not None, "the child ended before it was interrupted"
        seen += entered and line.startswith("import time:")
        entered = entered or line.rsplit("|", 1)[-1].strip() == ENTRY_PACKAGE
        said += [] if line.startswith("import time:") else [line]
    child.send_signal(signal.SIGINT)
    child.wait(timeout=120)  # its stderr is the reader thread's alone
    while (line := lines.get(timeout=120)) is not None:
        said += [] if line.startswith("import time:") else [line]
    return child.returncode, [ln.rstrip("\n") for ln in said if ln.strip()], seen


def test_ctrl_c_at_any_point_from_the_first_import_is_one_line_and_exit_130(tmp_path: Path,
                                                                              _isolated_home: Path) -> None:
    pool = tmp_path / "slow.yaml"
    pool.write_text(POOL)
    child, lines = _start(pool, _isolated_home)
    code, said, total = _interrupt_after(child, lines, None)  # the whole start-up, then waiting on the worker
    assert code == 130 and said == ["interrupted: nothing was saved"], said
    assert total > 200  # typer, rich, pydantic, the commands: the window the signal is sent into below
    for k in range(TRIES):
        started = time.monotonic()
        child, lines = _start(pool, _isolated_home)
        code, said, seen = _interrupt_after(child, lines, 1 + k * (total - 1) // TRIES)
        where = f"SIGINT after {seen} of {total} imports ({time.monotonic() - started:.2f} s)"
        assert not any("Traceback" in ln or "KeyboardInterrupt" in ln for ln in said), f"{where}: {said}"
        assert code == 130 and len(said) == 1 and said[0].startswith("interrupted"), f"{where}: {code} {said}"


def test_ctrl_c_while_the_arguments_are_read_or_the_logging_is_set_up_or_swallowed_by_python_is_said_too(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Between the imports and a command (LemonCommand says what a command keeps), typer turned Ctrl-C into exit
    130 without a word. Fault injection, a test double for the signal: the KeyboardInterrupt a SIGINT raises,
    raised where the app reads its options and where it sets up the logging."""
    import logging

    from lemon.cli import entry
    from lemon.cli.options import LemonGroup

    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    class Swallowed:
        """What a Ctrl-C landing in a weakref callback or a `__del__` is (seen in an import's module-lock cleanup,
        1 start-up in about 300): an exception Python cannot raise, so it printed "Exception ignored" and ran on."""

        def __del__(self) -> None:
            raise KeyboardInterrupt

    def swallowed(*args: object, **kwargs: object) -> None:
        Swallowed()  # collected at once
        time.sleep(10)  # set-up that takes a while: the Ctrl-C, sent again, ends it

    monkeypatch.setattr(sys, "argv", ["lemon", "validate", "spec.yaml"])
    for where, name, fault in ((LemonGroup, "parse_args", interrupt), (logging, "basicConfig", interrupt),
                               (logging, "basicConfig", swallowed)):
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}  # the entry point sets both
        with monkeypatch.context() as patch:
            patch.setattr(where, name, fault)
            patch.setattr(sys, "unraisablehook", sys.unraisablehook)  # the entry point sets it: put back after
            try:
                with pytest.raises(SystemExit) as stop:
                    entry()
            finally:
                for number, handler in handlers.items():
                    signal.signal(number, handler)
        assert stop.value.code == 130 and capsys.readouterr().err.splitlines() == ["interrupted"], fault
