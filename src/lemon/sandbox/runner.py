"""Run untrusted, model-written code (HumanEval) in bubblewrap sandboxes, and score it from outside its reach.

Why bubblewrap: a probe showed that Python-level blocking is not containment (`del sys.modules['posix']`
restores fork; `_socket` loads through `ExtensionFileLoader`). Containment now comes from the kernel, set up by
`bwrap` (Debian/Ubuntu package `bubblewrap`), a small audited tool, rather than hand-written unshare/mount code:

- a fresh PID namespace whose init is killed with the check (`--unshare-pid --die-with-parent`, and the
  process group is SIGKILLed on timeout): nothing outlives a check;
- an unprivileged uid: as root, bwrap runs privileged and the child drops to a fresh per-check uid at once
  (root ignores RLIMIT_NPROC); otherwise a user namespace maps the caller to uid 65534. RLIMIT_NPROC then
  bounds processes and threads;
- a private mount view: read-only /usr and the interpreter's prefix, a fresh /proc that shows only the
  sandbox, a minimal /dev, a size-limited private tmpfs at /tmp; no host /tmp, /home, /etc, /run or sockets;
- no network (`--unshare-net`), an empty environment (bwrap itself gets only PATH), no host fds;
- a seccomp filter refusing the calls that make memory outside RLIMIT_AS (memfd, SysV shm), and a cgroup v2
  per check (`memory.max`, `pids.max`) where the machine offers a writable one (`lemon.sandbox.memory`);
- inside, `lemon.sandbox.child` adds rlimits, Landlock where the kernel has it, and a Python-level second layer.

Scoring: `run_check` runs a completion and the upstream tests in TWO sandboxes joined by pipes; the tests call
the candidate through a proxy and compare plain builtin values, and only the tests' process holds the verdict
pipe (`lemon.benchmarks.humaneval` grades HumanEval with it). See docs/sandbox.md for the threat model and what
remains possible.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import marshal
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from lemon.errors import LemonError
from lemon.sandbox import memory as sandbox_memory

log = logging.getLogger(__name__)

Status = Literal["passed", "failed", "timeout", "error"]

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MEMORY_BYTES = 1 << 30
DEFAULT_FILE_BYTES = 10 << 20
DEFAULT_TMP_BYTES = 64 << 20
DEFAULT_MAX_TASKS = 32  # processes + threads per sandbox (ThreadPoolExecutor wants up to cpu_count + 4)
MAX_DETAIL_CHARS = 2000
MAX_STDOUT_CHARS = 4000
NOBODY = 65534
CHECK_UID_BASE = 0x40000000  # per-check uids, as root: far above any real account
CHECK_UID_SPAN = 1 << 24
CHILD_PATH = "/lemon/sandbox_child.py"
SANDBOX_PATH = "/usr/bin:/bin"
KILL_GRACE_S = 1.0
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`)"

SYS_LANDLOCK_CREATE_RULESET = 444
LANDLOCK_CREATE_RULESET_VERSION = 1


class SandboxError(LemonError):
    """The sandbox cannot be set up here; candidate code is never run without it."""


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of one check: `passed` iff `status == "passed"`; `detail` says why not."""

    passed: bool
    status: Status
    detail: str
    stdout: str = ""  # the tail of what the program printed (`run_script` only)


@dataclass(frozen=True)
class Limits:
    """Per-check bounds."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    file_bytes: int = DEFAULT_FILE_BYTES
    tmp_bytes: int = DEFAULT_TMP_BYTES
    max_tasks: int = DEFAULT_MAX_TASKS
    landlock: bool = True

    def child_config(self) -> dict[str, Any]:
        return {"cpu_s": max(1, math.ceil(self.timeout_s)) + 1, "memory_bytes": int(self.memory_bytes),
                "file_bytes": int(self.file_bytes), "max_tasks": int(self.max_tasks),
                "landlock_abi": landlock_abi() if self.landlock else 0}

    def memory_bound(self, cgroup: bool) -> int:
        """The most host memory one sandbox can take (docs/sandbox.md). With a cgroup: its `memory.max`, all
        memory of the check's sandboxes. Without: every task a process with its full address space and fds
        full of kernel buffers (`sandbox_memory.FD_BUFFER_BYTES`), plus the tmpfs; memfd and SysV memory are
        refused. A HumanEval check adds its tests' process (one more address space and fd buffers)."""
        if cgroup:
            return self.memory_bytes + self.tmp_bytes
        return self.max_tasks * (self.memory_bytes + sandbox_memory.FD_BUFFER_BYTES) + self.tmp_bytes


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 when unavailable): asked once per process, not enabled here."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        abi = int(libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                               ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)))
    except (OSError, AttributeError):
        return 0
    return max(abi, 0)


def find_bwrap() -> str:
    """The bwrap executable, or SandboxError naming the fix."""
    if not sys.platform.startswith("linux"):
        raise SandboxError(f"the code sandbox needs Linux with bubblewrap, not {sys.platform}")
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxError(f"`bwrap` not found on PATH: code checks need it; {INSTALL_HINT}")
    return path


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@functools.cache
def _interpreter() -> tuple[str, tuple[str, ...]]:
    """The base interpreter (not a venv's: no site-packages inside) and the directories it needs bound."""
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}
    binds = tuple(sorted(r for r in roots if not _under(r, "/usr")))
    if not any(_under(exe, r) for r in (*binds, "/usr")):
        binds = (*binds, os.path.dirname(exe))
    return exe, binds


@functools.cache
def _system_mounts() -> tuple[str, ...]:
    """/usr read-only, and the top-level links (merged /usr) or directories the loader needs."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = "/" + name
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return tuple(args)


def _parents(path: str) -> list[str]:
    """World-traversable mount-point parents: bwrap would make them 0700, shut to the dropped uid."""
    args: list[str] = []
    for parent in reversed(Path(path).parents[:-1]):
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def bwrap_command(bwrap: str, limits: Limits, seccomp_fd: int | None = None) -> list[str]:
    """The full command line for one sandboxed `sandbox_child` process (`seccomp_fd`: the filter's bytes)."""
    exe, binds = _interpreter()
    user = (["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if os.geteuid() == 0 else
            ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY), "--disable-userns"])
    mounts = [*_system_mounts()]
    for path in binds:
        mounts += [*_parents(path), "--ro-bind", path, path]
    child = os.path.realpath(Path(__file__).with_name("child.py"))
    return [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "sandbox", *user, *mounts,
            *([] if seccomp_fd is None else ["--seccomp", str(seccomp_fd)]),
            *_parents(CHILD_PATH), "--ro-bind", child, CHILD_PATH, "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(int(limits.tmp_bytes)), "--tmpfs", "/tmp",
            "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--clearenv",
            "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp",
            "--setenv", "LANG", "C.UTF-8", "--", exe, "-I", "-S", "-B", CHILD_PATH]


def _check_uid() -> int | None:
    """As root, a fresh uid per sandbox, so RLIMIT_NPROC counts this sandbox's tasks only."""
    return CHECK_UID_BASE + secrets.randbelow(CHECK_UID_SPAN) if os.geteuid() == 0 else None


def _memfd(name: str, data: bytes = b"") -> int:
    fd = os.memfd_create(name)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _tail(fd: int, limit: int = MAX_DETAIL_CHARS) -> str:
    size = os.fstat(fd).st_size
    return os.pread(fd, limit, max(0, size - limit)).decode("utf-8", "replace")


@dataclass(frozen=True)
class _Proc:
    popen: subprocess.Popen[bytes]
    out: int
    err: int


class _Session:
    """The processes and fds of one check; leaving it kills every process group and closes every fd."""

    def __init__(self, bwrap: str, limits: Limits) -> None:
        self.bwrap, self.limits = bwrap, limits
        self.deadline = time.monotonic() + limits.timeout_s
        self.procs: list[_Proc] = []
        self.fds: list[int] = []
        # Both sandboxes of a check share one cgroup: it bounds all their memory (tmpfs pages included).
        self.cgroup = sandbox_memory.new_check_cgroup(
            limits.memory_bytes + limits.tmp_bytes, 2 * (limits.max_tasks + sandbox_memory.BWRAP_TASKS))

    def pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self.fds += [r, w]
        return r, w

    def close(self, *fds: int) -> None:
        for fd in fds:
            if fd in self.fds:
                self.fds.remove(fd)
                os.close(fd)

    def spawn(self, cfg: dict[str, Any], pass_fds: tuple[int, ...]) -> _Proc:
        """Start one sandboxed child with `cfg` on stdin; it inherits exactly `pass_fds`."""
        config = {**self.limits.child_config(), **cfg, "uid": _check_uid()}
        config_fd = _memfd("lemon-sandbox-config", marshal.dumps(config))
        program = _seccomp_program()
        filter_fd = None if program is None else _memfd("lemon-sandbox-seccomp", program)
        out, err = _memfd("lemon-sandbox-stdout"), _memfd("lemon-sandbox-stderr")
        self.fds += [out, err]
        command = bwrap_command(self.bwrap, self.limits, filter_fd)
        try:
            popen = subprocess.Popen(command if self.cgroup is None else self.cgroup.wrap(command),
                                     stdin=config_fd, stdout=out, stderr=err, env={"PATH": SANDBOX_PATH},
                                     start_new_session=True, close_fds=True,
                                     pass_fds=(*pass_fds, *([] if filter_fd is None else [filter_fd])))
        finally:
            os.close(config_fd)
            if filter_fd is not None:
                os.close(filter_fd)
        proc = _Proc(popen, out, err)
        self.procs.append(proc)
        return proc

    def wait(self, proc: _Proc) -> bool:
        """Wait for `proc` until the deadline; False when the check ran out of time."""
        try:
            proc.popen.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
        return True

    def settle(self, proc: _Proc) -> None:
        """Give a process that should be ending a moment, then kill it."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=KILL_GRACE_S)
        self._kill(proc)

    @staticmethod
    def _kill(proc: _Proc) -> None:
        # bwrap's init dies with it (--die-with-parent), and with the init the whole PID namespace.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait()

    def __enter__(self) -> _Session:
        return self

    def out_of_memory(self) -> bool:
        return self.cgroup is not None and self.cgroup.out_of_memory()

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            self._kill(proc)
        if self.cgroup is not None:
            self.cgroup.close()
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


@functools.cache
def _seccomp_program() -> bytes | None:
    program = sandbox_memory.seccomp_program()
    if program is None:
        log.warning("sandbox: no seccomp filter for %s; memfd and SysV memory are not refused here "
                    "(docs/sandbox.md)", os.uname().machine)
    return program


def _read_verdict(fd: int) -> str:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 256).decode("ascii", "replace")
    except BlockingIOError:
        return ""


def _exit_reason(rc: int, cfg: dict[str, Any]) -> tuple[Status, str] | None:
    """bwrap reports a child killed by signal N as 128 + N."""
    if rc == 128 + signal.SIGXCPU:
        return "timeout", f"CPU time limit of {cfg['cpu_s']} s exceeded"
    if rc == 128 + signal.SIGXFSZ:
        return "failed", "file size limit exceeded"
    if rc > 128:
        return "failed", f"killed by {_signal_name(rc - 128)}"
    return None


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _last_line(proc: _Proc) -> str:
    lines = _tail(proc.err).strip().splitlines()
    return lines[-1][:MAX_DETAIL_CHARS] if lines else ""


def _verdict(session: _Session, judge: _Proc, verdict: str, marker: str) -> SandboxResult:
    rc = judge.popen.returncode
    if rc == 0 and verdict == marker:
        return SandboxResult(True, "passed", "")
    if session.out_of_memory():
        limit = session.limits.memory_bytes + session.limits.tmp_bytes
        return SandboxResult(False, "failed", f"memory limit of {limit >> 20} MiB exceeded (cgroup memory.max)")
    reason = _exit_reason(rc, session.limits.child_config())
    if reason is not None:
        return SandboxResult(False, reason[0], reason[1])
    if rc == 0:
        return SandboxResult(False, "failed", "exited before the program finished (early exit)")
    line = _last_line(judge)
    status: Status = "error" if line.startswith("bwrap:") else "failed"
    return SandboxResult(False, status, line or f"exit code {rc}")


def _run_program(bwrap: str, code: str, limits: Limits, role: str = "program") -> SandboxResult:
    marker = secrets.token_hex(16)
    with _Session(bwrap, limits) as session:
        verdict_r, verdict_w = session.pipe()
        proc = session.spawn({"role": role, "code": code, "verdict_fd": verdict_w, "marker": marker},
                             (verdict_w,))
        session.close(verdict_w)
        if not session.wait(proc):
            return SandboxResult(False, "timeout", f"timed out after {limits.timeout_s:g} s (sandbox killed)")
        result = _verdict(session, proc, _read_verdict(verdict_r), marker)
        return replace(result, stdout=_tail(proc.out, MAX_STDOUT_CHARS)) if role == "script" else result


@functools.cache
def _ready(bwrap: str) -> None:
    """Once per process: a trivial program must pass, or every check would fail for the sandbox's sake."""
    result = _run_program(bwrap, "pass\n", Limits(timeout_s=30.0))
    if not result.passed:
        hint = "" if os.geteuid() == 0 else " (unprivileged user namespaces must be enabled)"
        raise SandboxError(f"the bubblewrap sandbox does not start here{hint}: {result.detail[:300]}")


def sandbox() -> str:
    """The bwrap path, checked to start a sandbox (once per process); SandboxError otherwise."""
    bwrap = find_bwrap()
    _ready(bwrap)
    return bwrap


def run_program(
    code: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    file_bytes: int = DEFAULT_FILE_BYTES,
    tmp_bytes: int = DEFAULT_TMP_BYTES,
    max_tasks: int = DEFAULT_MAX_TASKS,
    landlock: bool = True,
) -> SandboxResult:
    """Run `code` as a module in one sandbox; passed iff it runs to the end without an exception.

    The program is its own judge here (containment, not an unforgeable verdict): scoring uses `run_check`."""
    limits = Limits(timeout_s, memory_bytes, file_bytes, tmp_bytes, max_tasks, landlock)
    bwrap = sandbox()
    try:
        return _run_program(bwrap, code, limits)
    except OSError as exc:  # out of fds, processes or memory on the host: this check errs, the run goes on
        return _host_error(exc)


def run_script(code: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> SandboxResult:
    """Run `code` as `__main__` in one sandbox (default limits) and return what it printed (`stdout`, its last
    MAX_STDOUT_CHARS): how a program-of-thought agent's code computes its answer (`lemon.runtime.programs`)."""
    bwrap = sandbox()
    try:
        return _run_program(bwrap, code, Limits(timeout_s), role="script")
    except OSError as exc:
        return _host_error(exc)


def _host_error(exc: OSError) -> SandboxResult:
    log.warning("the sandbox could not run a check: %s", exc)
    return SandboxResult(False, "error", f"sandbox error: {type(exc).__name__}: {exc}")


def run_check(program: str, prompt: str, test: str, entry: str, limits: Limits | None = None) -> SandboxResult:
    """Run `program` (the candidate) and the upstream `test` in two sandboxes; passed iff `check` returned.

    The tests' process never runs candidate code: it calls `entry` through a pipe and gets builtin values."""
    bwrap = sandbox()
    try:
        return _run_check(bwrap, program, prompt, test, entry, limits or Limits())
    except OSError as exc:
        return _host_error(exc)


def _run_check(bwrap: str, program: str, prompt: str, test: str, entry: str, limits: Limits) -> SandboxResult:
    marker = secrets.token_hex(16)
    with _Session(bwrap, limits) as session:
        req_r, req_w = session.pipe()
        resp_r, resp_w = session.pipe()
        verdict_r, verdict_w = session.pipe()
        candidate = session.spawn({"role": "candidate", "code": program, "entry": entry, "request_fd": req_r,
                                   "response_fd": resp_w}, (req_r, resp_w))
        session.close(req_r, resp_w)
        tests = session.spawn({"role": "tests", "prompt": prompt, "test": test, "entry": entry,
                               "request_fd": req_w, "response_fd": resp_r, "verdict_fd": verdict_w,
                               "marker": marker}, (req_w, resp_r, verdict_w))
        session.close(req_w, resp_r, verdict_w)
        if not session.wait(tests):
            return SandboxResult(False, "timeout", f"timed out after {limits.timeout_s:g} s (sandbox killed)")
        result = _verdict(session, tests, _read_verdict(verdict_r), marker)
        if result.passed:
            return result  # leaving the session kills the candidate's sandbox at once
        session.settle(candidate)
        if candidate.popen.returncode not in (0, -signal.SIGKILL):
            result = SandboxResult(False, result.status, _last_line(candidate) or result.detail)
        return result

