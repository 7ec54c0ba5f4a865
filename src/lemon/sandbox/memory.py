"""Bounds on ALL memory of a sandboxed check, not only what its processes map.

Why: `RLIMIT_AS` counts mapped memory only. Buffers of `memfd_create`, kept open or parked in a socketpair,
took 1.1 GiB of host memory from one process of a 1 GiB check (issue 26), and the check still passed. Two
layers close that:

- a **cgroup v2** per check (`memory.max`, `memory.swap.max = 0`, `pids.max`, `memory.oom.group`) where the
  machine offers a writable one with the memory and pids controllers: the kernel then counts every page of
  the check (anonymous, tmpfs, memfd, socket and pipe buffers, kernel memory) and kills the whole check at
  the bound;
- always, a **seccomp filter** (given to bubblewrap as raw BPF: no libseccomp binding is packaged for this
  Python) that refuses the calls creating unmapped memory outside every rlimit (`memfd_create`,
  `memfd_secret`, SysV `shmget` and `msgget`, `mq_open`, growing a socket's buffers), IP sockets, and some
  kernel attack surface no check needs (io_uring, userfaultfd, bpf, perf_event_open, keyrings). Without a
  cgroup, what remains is bounded by rlimits (address space, 32 fds of kernel buffers): docs/sandbox.md.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import platform
import secrets
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lemon.errors import LemonError
from lemon.sandbox.child import MAX_FDS

log = logging.getLogger(__name__)

CGROUP_ENV = "LEMON_SANDBOX_CGROUP"  # a delegated cgroup v2 folder to create check cgroups in, or "off"
CGROUP_PREFIX = "lemon-check-"
BWRAP_TASKS = 3  # bwrap, its init in the PID namespace, and the child before it starts threads
RMDIR_WAIT_S = 2.0
# Kernel buffers one process can park outside RLIMIT_AS when the cgroup is missing: each of its fds, open or
# in flight over a Unix socket (the kernel caps those at RLIMIT_NOFILE too), holds at most a pipe at the
# default fs.pipe-max-size (1 MiB); socket buffers stay at their defaults (growing them is refused).
FD_BUFFER_BYTES = 2 * MAX_FDS * (1 << 20)

# ---- seccomp ----------------------------------------------------------------------------------------------

SOL_SOCKET, AF_INET, AF_INET6 = 1, 2, 10
SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE = 7, 8, 32, 33
Condition = tuple[int, frozenset[int]]  # (argument index, values): the rule applies when the argument is one


@dataclass(frozen=True)
class Denied:
    """One refused system call (EPERM), on both architectures, when every condition on its arguments holds."""

    name: str
    x86_64: int
    aarch64: int
    why: str
    when: tuple[Condition, ...] = ()


DENIED_SYSCALLS: tuple[Denied, ...] = (
    Denied("memfd_create", 319, 279, "unmapped memory outside RLIMIT_AS (the issue 26 probe)"),
    Denied("memfd_secret", 447, 447, "unmapped memory outside RLIMIT_AS"),
    Denied("shmget", 29, 194, "SysV segments keep their memory after shmdt, outside RLIMIT_AS"),
    Denied("msgget", 68, 186, "SysV message queues hold kernel memory"),
    Denied("mq_open", 240, 180, "POSIX message queues hold kernel memory"),
    Denied("setsockopt", 54, 208, "a socket buffer grown to net.core.[rw]mem_max (MiBs per fd) parks memory "
           "outside RLIMIT_AS; the defaults stay",
           ((1, frozenset({SOL_SOCKET})), (2, frozenset({SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE})))),
    Denied("socket", 41, 198, "IP sockets: no network in the sandbox; TCP autotuning grows buffers",
           ((0, frozenset({AF_INET, AF_INET6})),)),
    Denied("io_uring_setup", 425, 425, "kernel attack surface; pins memory"),
    Denied("userfaultfd", 323, 282, "kernel attack surface"),
    Denied("bpf", 321, 280, "kernel attack surface"),
    Denied("perf_event_open", 298, 241, "kernel attack surface"),
    Denied("add_key", 248, 217, "keyrings: kernel memory and attack surface"),
    Denied("request_key", 249, 218, "keyrings: kernel memory and attack surface"),
    Denied("keyctl", 250, 219, "keyrings: kernel memory and attack surface"),
)
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06
SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
SECCOMP_DATA_NR, SECCOMP_DATA_ARCH, SECCOMP_DATA_ARGS = 0, 4, 16  # struct seccomp_data; args are u64 (LE)
DENY = (BPF_RET_K, SECCOMP_RET_ERRNO | errno.EPERM, None, None)

Insn = tuple[int, int, str | None, str | None]  # code, k, jump-if-true label, jump-if-false label


def _assemble(items: list[Insn | str]) -> bytes:
    """`struct sock_filter` bytes; a str item is a label, and jumps name labels (None: the next insn)."""
    where: dict[str, int] = {}
    insns: list[Insn] = []
    for item in items:
        if isinstance(item, str):
            where[item] = len(insns)
        else:
            insns.append(item)
    out = []
    for i, (code, k, jt, jf) in enumerate(insns):
        offsets = [0 if label is None else where[label] - i - 1 for label in (jt, jf)]
        if not all(0 <= o < 256 for o in offsets):
            raise ValueError("seccomp program too long for a jump")
        out.append(struct.pack("=HBBI", code, offsets[0], offsets[1], k))
    return b"".join(out)


def _rule(n: int, nr: int, when: tuple[Condition, ...]) -> list[Insn | str]:
    """Instructions of one rule: load the call number; on a match, test each condition (an argument's low
    32 bits, as the kernel reads an int) and refuse when all hold; otherwise fall through to the next rule."""
    end = f"r{n}"
    items: list[Insn | str] = [(BPF_LD_W_ABS, SECCOMP_DATA_NR, None, None), (BPF_JEQ_K, nr, None, end)]
    for j, (arg, values) in enumerate(when):
        ok = f"r{n}c{j}"
        items.append((BPF_LD_W_ABS, SECCOMP_DATA_ARGS + 8 * arg, None, None))
        ordered = sorted(values)
        items += [(BPF_JEQ_K, v, ok, end if v == ordered[-1] else None) for v in ordered]
        items.append(ok)
    return [*items, DENY, end]


@functools.cache
def seccomp_program(machine: str | None = None) -> bytes | None:
    """The filter as `struct sock_filter` bytes for bwrap's `--seccomp FD`; None on an architecture not listed.

    A foreign ABI (i386 or arm32 calls from a 64-bit process, whose numbers differ) kills the process; x32
    calls on x86-64 are refused; the listed calls fail with EPERM; everything else is allowed."""
    machine = machine or platform.machine()
    if machine not in AUDIT_ARCH:
        return None
    items: list[Insn | str] = [(BPF_LD_W_ABS, SECCOMP_DATA_ARCH, None, None),
                               (BPF_JEQ_K, AUDIT_ARCH[machine], "native", None),
                               (BPF_RET_K, SECCOMP_RET_KILL_PROCESS, None, None), "native"]
    if machine == "x86_64":
        items += [(BPF_LD_W_ABS, SECCOMP_DATA_NR, None, None), (BPF_JGE_K, X32_SYSCALL_BIT, "deny", None)]
    for n, rule in enumerate(DENIED_SYSCALLS):
        items += _rule(n, rule.x86_64 if machine == "x86_64" else rule.aarch64, rule.when)
    return _assemble([*items, (BPF_RET_K, SECCOMP_RET_ALLOW, None, None), "deny", DENY])


# ---- cgroup v2 --------------------------------------------------------------------------------------------

def _cgroup2_mount(mountinfo: str) -> tuple[Path, str] | None:
    """The cgroup2 mount point and the cgroup path its root shows, from /proc/self/mountinfo."""
    for line in mountinfo.splitlines():
        fields = line.split(" - ", 1)
        if len(fields) == 2 and fields[1].split(" ", 1)[0] == "cgroup2":
            left = fields[0].split()
            return Path(left[4]), left[3]
    return None


def _own_cgroup(proc_cgroup: str) -> str | None:
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def _controllers(folder: Path) -> set[str]:
    try:
        return set((folder / "cgroup.subtree_control").read_text().split())
    except OSError:
        return set()


def candidate_bases(mountinfo: str, proc_cgroup: str) -> list[Path]:
    """Folders whose children get the memory and pids controllers and that we may write: this process's own
    cgroup (only a root can hold processes and enable controllers for children) up to the mount's root."""
    mount, own = _cgroup2_mount(mountinfo), _own_cgroup(proc_cgroup)
    if mount is None or own is None:
        return []
    point, root = mount
    rel = own[len(root):] if root != "/" and own.startswith(root) else own
    folder = point / rel.lstrip("/")
    chain = [folder, *folder.parents]
    chain = chain[:chain.index(point) + 1] if point in chain else [point]
    return [f for f in chain if {"memory", "pids"} <= _controllers(f) and os.access(f, os.W_OK)]


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:  # one write(2): cgroup files take a value per write
        fh.write(value)


def _usable(base: Path) -> bool:
    """Whether a check cgroup can be made, limited and removed under `base` (tried once, not assumed)."""
    try:
        probe = CheckCgroup.create(base, 64 << 20, 8)
    except OSError as exc:
        log.debug("cgroup base %s is not usable: %s", base, exc)
        return False
    try:
        moved = subprocess.run(probe.wrap(["/bin/true"]), capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        moved = False
    probe.close()
    return moved


@functools.cache
def cgroup_base() -> Path | None:
    """Where check cgroups go: `LEMON_SANDBOX_CGROUP` (a folder, or `off`), else the first usable candidate."""
    wanted = os.environ.get(CGROUP_ENV, "").strip()
    if wanted.lower() == "off":
        return None
    if wanted:
        if not _usable(Path(wanted)):
            raise LemonError(f"{CGROUP_ENV}={wanted} is not a writable cgroup v2 folder with the memory and pids "
                             f"controllers in its cgroup.subtree_control; fix it or set {CGROUP_ENV}=off")
        return Path(wanted)
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        own = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for base in candidate_bases(mountinfo, own):
        if _usable(base):
            log.info("sandbox: every check runs in its own cgroup under %s (memory.max, pids.max)", base)
            return base
    log.info("sandbox: no writable cgroup v2 with memory and pids here; memory is bounded by rlimits and the "
             "seccomp filter (docs/sandbox.md)")
    return None


class CheckCgroup:
    """One check's cgroup: every process of the check is started inside it; closing kills what is left."""

    def __init__(self, path: Path, memory_bytes: int) -> None:
        self.path, self.memory_bytes = path, memory_bytes

    @classmethod
    def create(cls, base: Path, memory_bytes: int, max_tasks: int) -> CheckCgroup:
        path = base / f"{CGROUP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir(mode=0o755)
        if not ((path / "memory.max").is_file() and (path / "pids.max").is_file()):  # the kernel makes them
            path.rmdir()
            raise OSError(errno.ENOTSUP, f"{base} is not a cgroup v2 folder delegating memory and pids")
        group = cls(path, memory_bytes)
        try:
            _write(path / "memory.max", str(int(memory_bytes)))
            if (path / "memory.swap.max").exists():
                _write(path / "memory.swap.max", "0")
            _write(path / "memory.oom.group", "1")
            _write(path / "pids.max", str(int(max_tasks)))
        except OSError:
            group.close()
            raise
        return group

    def wrap(self, command: list[str]) -> list[str]:
        """`command` started from inside this cgroup: a shell moves itself in, then execs it (no preexec_fn,
        which is unsafe in a threaded harness); if the move fails, nothing starts."""
        procs = str(self.path / "cgroup.procs")
        return ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', procs, *command]

    def out_of_memory(self) -> bool:
        """Whether the kernel killed a process of the check at `memory.max`."""
        try:
            events = (self.path / "memory.events").read_text().split()
        except OSError:
            return False
        counts = dict(zip(events[::2], events[1::2], strict=False))
        return int(counts.get("oom_kill", "0")) > 0 or int(counts.get("oom_group_kill", "0")) > 0

    def close(self) -> None:
        """Kill every process still in the cgroup and remove it (waiting briefly for the kernel to empty it)."""
        with contextlib.suppress(OSError):
            _write(self.path / "cgroup.kill", "1")
        deadline = time.monotonic() + RMDIR_WAIT_S
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    log.warning("sandbox cgroup %s could not be removed: %s", self.path, exc)
                    return
            time.sleep(0.01)


def new_check_cgroup(memory_bytes: int, max_tasks: int) -> CheckCgroup | None:
    """A fresh cgroup for one check where the machine offers one, else None (the rlimits and seccomp hold)."""
    base = cgroup_base()
    return None if base is None else CheckCgroup.create(base, memory_bytes, max_tasks)
