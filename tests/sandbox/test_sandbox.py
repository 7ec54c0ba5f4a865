"""The sandbox: programs end as failures within the timeout, and this process keeps running.

The hostile programs of the issue 12 probe are in test_sandbox_hostile.py; HumanEval scoring and its cheats in
test_sandbox_humaneval.py."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lemon.sandbox import runner as sandbox
from lemon.sandbox.runner import SandboxError, run_program, run_script

TIMEOUT_S = 2.0
SLACK_S = 4.0  # process start-up on a slow, busy machine


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def harness() -> Iterator[None]:
    """Checks around each run: this process survives and keeps no pipe or memfd of the check open."""
    pid, before = os.getpid(), _open_fds()
    yield
    assert os.getpid() == pid
    assert _open_fds() <= before


def _run(code: str, timeout_s: float = TIMEOUT_S) -> tuple[str, str, float]:
    start = time.monotonic()
    result = run_program(code, timeout_s=timeout_s)
    elapsed = time.monotonic() - start
    assert result.passed is (result.status == "passed")
    assert elapsed < timeout_s + SLACK_S, f"took {elapsed:.1f} s"
    return result.status, result.detail, elapsed


def test_passing_program(harness: None) -> None:
    assert _run("def f(x):\n    return x + 1\n\nassert f(1) == 2\nprint('ok')\n")[0] == "passed"


def test_failing_program(harness: None) -> None:
    status, detail, _ = _run("assert 1 + 1 == 3, 'arithmetic is broken'")
    assert status == "failed" and "AssertionError: arithmetic is broken" in detail


def test_syntax_error_fails(harness: None) -> None:
    status, detail, _ = _run("def f(:\n    pass")
    assert status == "failed" and "SyntaxError" in detail


@pytest.mark.parametrize("code", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "exit()"])
def test_early_exit_does_not_pass(code: str, harness: None) -> None:
    assert _run(code)[0] == "failed"


def test_main_block_of_a_completion_does_not_run(harness: None) -> None:
    assert _run("if __name__ == '__main__':\n    raise SystemExit(1)\n")[0] == "passed"


def test_fork_bomb(harness: None) -> None:
    status, detail, _ = _run("import os\nwhile True:\n    os.fork()\n")
    assert status == "failed" and "os.fork is not allowed" in detail  # the second layer still answers first


def test_subprocess_is_unavailable(harness: None) -> None:
    status, detail, _ = _run("import subprocess\nsubprocess.run(['true'])")
    assert status == "failed" and "starting a process is not allowed" in detail


def test_infinite_loop_is_killed(harness: None) -> None:
    status, detail, elapsed = _run("while True:\n    pass\n")
    assert status == "timeout" and "timed out" in detail
    assert elapsed >= TIMEOUT_S - 0.1


def test_sleeping_children_are_killed_with_the_group(harness: None) -> None:
    status, _, elapsed = _run("import time\ntime.sleep(60)\n", timeout_s=1.0)
    assert status == "timeout" and elapsed < 1.0 + SLACK_S


def test_ten_gigabyte_allocation(harness: None) -> None:
    status, detail, _ = _run("x = bytearray(10 * 1024 ** 3)\nx[-1] = 1\n")
    assert status == "failed" and "MemoryError" in detail


def test_output_flood_is_bounded(harness: None) -> None:
    status, _, _ = _run("while True:\n    print('x' * 100000)\n")
    assert status in ("failed", "timeout")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside"
    target.mkdir()
    return target


def test_write_outside_the_private_tmp(outside: Path, harness: None) -> None:
    for target in (outside / "pwned.txt", Path("/usr/pwned.txt"), Path("/pwned.txt")):
        status, _, _ = _run(f"import _io\n_io.open({str(target)!r}, 'w').write('x')\n")
        assert status == "failed" and not target.exists()


def test_write_inside_the_private_tmp_is_allowed(harness: None) -> None:
    code = ("import os\nopen('scratch.txt', 'w').write('x')\nassert open('scratch.txt').read() == 'x'\n"
            "assert os.getcwd() == '/tmp'\n")
    assert _run(code)[0] == "passed"


@pytest.fixture
def listener() -> Iterator[int]:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()


def test_socket_connection(listener: int, harness: None) -> None:
    code = f"import socket\ns = socket.create_connection(('127.0.0.1', {listener}), timeout=1)\n"
    assert _run(code)[0] == "failed"


def test_cannot_kill_other_processes(harness: None) -> None:
    victim = subprocess.Popen(["sleep", "30"])
    try:
        assert _run(f"import os, signal\nos.kill({victim.pid}, signal.SIGKILL)\n")[0] == "failed"
        time.sleep(0.2)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_environment_is_stripped(monkeypatch: pytest.MonkeyPatch, harness: None) -> None:
    monkeypatch.setenv("LEMON_SECRET_TOKEN", "hunter2")
    code = ("import os\nassert 'LEMON_SECRET_TOKEN' not in os.environ\n"
            "assert os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'] == '/tmp'\n")
    assert _run(code)[0] == "passed"


def test_without_bwrap_nothing_runs_and_the_error_names_the_fix(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no bwrap on it
    with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
        run_program(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\n")
    assert not (tmp_path / "ran").exists()


def test_the_landlock_probe_runs_once_per_process() -> None:
    sandbox.landlock_abi.cache_clear()
    first = sandbox.landlock_abi()
    assert sandbox.landlock_abi() == first and sandbox.landlock_abi.cache_info().misses == 1


def test_a_host_out_of_resources_is_an_error_for_that_check_only(monkeypatch: pytest.MonkeyPatch,
                                                                  harness: None) -> None:
    assert run_program("pass\n").passed  # the sandbox works here (and its once-per-process probe is done)

    def memfd_double(name: str, flags: int = 0) -> int:  # a test double: the host has no fds left
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(sandbox.os, "memfd_create", memfd_double)
    result = run_program("pass\n")
    assert result.status == "error" and "Too many open files" in result.detail


def test_a_script_runs_as_main_and_its_output_comes_back(harness: None) -> None:
    code = "def f():\n    return 6 * 7\n\nif __name__ == '__main__':\n    print('first')\n    print(f())\n"
    result = run_script(code)
    assert (result.status, result.stdout) == ("passed", "first\n42\n")


def test_a_script_is_contained_as_a_program_is(harness: None) -> None:
    result = run_script("import socket\nsocket.create_connection(('127.0.0.1', 9))\nprint('out')\n")
    assert not result.passed and "out" not in result.stdout
    looping = run_script("print('started', flush=True)\nwhile True:\n    pass\n", timeout_s=TIMEOUT_S)
    assert looping.status == "timeout"
