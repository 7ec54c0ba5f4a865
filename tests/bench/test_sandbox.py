"""The sandbox: hostile programs end as failures within the timeout, and this process keeps running."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lemon.bench.datasets import load_split
from lemon.bench.sandbox import check_humaneval, landlock_abi, network_prefix, run_humaneval, run_program

TIMEOUT_S = 2.0
SLACK_S = 4.0  # process start-up on a slow, busy machine


def _sandbox_dirs() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("lemon-sandbox-")}


@pytest.fixture
def harness() -> Iterator[None]:
    """Checks around each hostile run: this process survives and no sandbox directory is left behind."""
    pid, before = os.getpid(), _sandbox_dirs()
    yield
    assert os.getpid() == pid
    assert _sandbox_dirs() <= before


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
    status, _, _ = _run("import os\nwhile True:\n    os.fork()\n")
    assert status in ("failed", "timeout")


def test_subprocess_is_unavailable(harness: None) -> None:
    assert _run("import subprocess\nsubprocess.run(['true'])")[0] == "failed"


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


def test_write_outside_the_temporary_directory(outside: Path, harness: None) -> None:
    status, _, _ = _run(f"open({str(outside / 'pwned.txt')!r}, 'w').write('x')\n")
    assert status == "failed" and not (outside / "pwned.txt").exists()


def test_write_inside_the_temporary_directory_is_allowed(harness: None) -> None:
    code = "import os\nopen('scratch.txt', 'w').write('x')\nassert open('scratch.txt').read() == 'x'\n"
    assert _run(code)[0] == "passed"


@pytest.mark.skipif(landlock_abi() < 1, reason="needs Landlock (Linux >= 5.13) for a kernel-level file guard")
def test_write_outside_bypassing_the_python_guard(outside: Path, harness: None) -> None:
    code = f"import _io\n_io.open({str(outside / 'pwned.txt')!r}, 'w').write('x')\n"
    assert _run(code)[0] == "failed" and not (outside / "pwned.txt").exists()


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


@pytest.mark.skipif(landlock_abi() < 4 and not network_prefix(),
                    reason="needs a network namespace or Landlock >= 4 for a kernel-level network guard")
def test_socket_connection_bypassing_the_python_guard(listener: int, harness: None) -> None:
    code = ("import sys\nsys.meta_path.pop(0)\nimport _socket\n"
            f"s = _socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', {listener}))\n")
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
            "assert os.getcwd() == os.environ['HOME']\n")
    assert _run(code)[0] == "passed"


def test_canonical_humaneval_solutions_pass(data_dir: Path, harness: None) -> None:
    items = load_split("humaneval", "all", data_dir)[:5]
    for item in items:
        body = item.meta["canonical_solution"]
        assert check_humaneval(body, item), item.id                              # prompt + body
        assert check_humaneval(item.meta["prompt"] + body, item), item.id        # the full function
    result = run_humaneval("    return None\n", items[0])
    assert not result.passed and result.status == "failed" and "AssertionError" in result.detail
