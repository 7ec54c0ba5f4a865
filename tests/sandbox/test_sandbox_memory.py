"""The pieces of the sandbox's memory bound that need no sandbox: the seccomp program and the cgroup search.

The filter's effect on real programs is tested in test_sandbox_hostile.py (memfd, SysV, socket buffers)."""

from __future__ import annotations

import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

from lemon.sandbox import memory as sandbox_memory
from lemon.sandbox.memory import DENIED_SYSCALLS, candidate_bases, seccomp_program


def _decode(program: bytes) -> list[tuple[int, int, int, int]]:
    assert len(program) % 8 == 0
    return [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_program_checks_the_architecture_first_and_ends_in_allow_then_deny(machine: str) -> None:
    insns = _decode(seccomp_program(machine) or b"")
    assert insns[0] == (0x20, 0, 0, 4)  # load seccomp_data.arch
    assert insns[2] == (0x06, 0, 0, 0x80000000)  # a foreign ABI kills the process
    assert insns[-2] == (0x06, 0, 0, 0x7FFF0000) and insns[-1] == (0x06, 0, 0, 0x50001)  # ALLOW, EPERM
    numbers = {k for code, _, _, k in insns if code == 0x15}
    column = "x86_64" if machine == "x86_64" else "aarch64"
    assert {getattr(d, column) for d in DENIED_SYSCALLS} <= numbers
    for i, (code, jt, jf, _) in enumerate(insns):  # every jump lands inside the program
        if code & 0x07 == 0x05:
            assert i + 1 + max(jt, jf) < len(insns)


def test_an_unknown_architecture_gets_no_program() -> None:
    assert seccomp_program("riscv64") is None


def _cgroup_folder(path: Path, controllers: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.subtree_control").write_text(controllers + "\n")
    return path


def test_the_cgroup_search_keeps_only_folders_that_delegate_memory_and_pids(tmp_path: Path) -> None:
    mount = _cgroup_folder(tmp_path / "cg", "cpu memory pids")
    _cgroup_folder(mount / "user.slice", "memory pids")
    _cgroup_folder(mount / "user.slice" / "session.scope", "")  # ours: holds processes, enables nothing
    mountinfo = f"41 23 0:38 / {mount} rw,relatime - cgroup2 cgroup2 rw\n"
    found = candidate_bases(mountinfo, "0::/user.slice/session.scope\n")
    assert found == [mount / "user.slice", mount]


def test_a_hybrid_machine_without_a_memory_controller_in_v2_has_no_cgroup(tmp_path: Path) -> None:
    mount = _cgroup_folder(tmp_path / "unified", "hugetlb")
    mountinfo = (f"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
                 f"41 31 0:38 / {mount} rw,relatime - cgroup2 cgroup2 rw\n")
    assert candidate_bases(mountinfo, "4:memory:/x\n0::/\n") == []
    assert candidate_bases("", "0::/\n") == []


def test_a_mount_rooted_below_the_hierarchy_maps_our_path_onto_it(tmp_path: Path) -> None:
    """In a container without its own cgroup namespace the mount's root is the container's cgroup."""
    mount = _cgroup_folder(tmp_path / "cg", "memory pids")
    _cgroup_folder(mount / "init", "")
    mountinfo = f"41 23 0:38 /docker/abc {mount} rw,relatime - cgroup2 cgroup2 rw\n"
    assert candidate_bases(mountinfo, "0::/docker/abc/init\n") == [mount]


def test_cgroup_off_disables_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox_memory.cgroup_base.cache_clear()
    monkeypatch.setenv(sandbox_memory.CGROUP_ENV, "off")
    try:
        assert sandbox_memory.cgroup_base() is None
    finally:
        sandbox_memory.cgroup_base.cache_clear()


@pytest.mark.parametrize("folder", ["missing", "plain"])
def test_a_named_cgroup_that_cannot_be_used_is_one_line(folder: str, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """A missing folder, or a plain one (not cgroupfs: the kernel makes no memory.max in its children)."""
    (tmp_path / "plain").mkdir()
    sandbox_memory.cgroup_base.cache_clear()
    monkeypatch.setenv(sandbox_memory.CGROUP_ENV, str(tmp_path / folder))
    try:
        with pytest.raises(sandbox_memory.LemonError, match=r"LEMON_SANDBOX_CGROUP=.* set LEMON_SANDBOX_CGROUP=off"):
            sandbox_memory.cgroup_base()
    finally:
        sandbox_memory.cgroup_base.cache_clear()
    assert list((tmp_path / "plain").iterdir()) == []


def _writable_cgroup2() -> Path | None:
    found = sandbox_memory._cgroup2_mount(Path("/proc/self/mountinfo").read_text())
    if found is None or not os.access(found[0], os.W_OK):
        return None
    return found[0]


@pytest.mark.skipif(_writable_cgroup2() is None, reason="no writable cgroup2 mount here")
def test_a_check_cgroup_starts_its_command_inside_and_closing_kills_and_removes_it() -> None:
    """The mechanics on a real cgroup2 (any controllers): the shell moves itself in before exec, a failed
    move starts nothing, and close() kills every process left (forked ones too) and removes the folder."""
    mount = _writable_cgroup2()
    assert mount is not None
    path = mount / f"{sandbox_memory.CGROUP_PREFIX}test-{os.getpid()}"
    path.mkdir()
    if not (path / "cgroup.kill").exists():
        path.rmdir()
        pytest.skip("a kernel before 5.14: no cgroup.kill")
    group = sandbox_memory.CheckCgroup(path, 1 << 30)
    proc = subprocess.Popen(group.wrap(["/bin/sh", "-c", "sleep 60 & sleep 60"]))
    try:
        deadline = time.monotonic() + 10
        while len((path / "cgroup.procs").read_text().split()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert str(proc.pid) in (path / "cgroup.procs").read_text().split()
    finally:
        group.close()
    assert proc.wait(timeout=10) == -9 and not path.exists()
    missing = sandbox_memory.CheckCgroup(mount / "no-such-cgroup", 1 << 30)
    done = subprocess.run(missing.wrap(["/bin/echo", "started"]), capture_output=True, text=True, timeout=10)
    assert done.returncode != 0 and done.stdout == ""
