"""Run untrusted, model-written code (HumanEval) in a separate, killable, resource-limited process.

Why: the projects this one learns from ran completions inside the harness with a timeout thread that never
killed anything. Here the harness never executes candidate code itself. Each program runs in its own
`python -I -B` process, and the harness survives whatever the program does.

Defences, outermost first (each one is independent of the others):

1. A new session (`start_new_session`), so the process and anything it spawns form one process group; a
   wall-clock timeout kills the whole group with SIGKILL, and the group is killed again after every run
   (no stray children). Output goes to files in the temporary directory, never into harness memory.
2. A fresh temporary directory as cwd, HOME and TMPDIR, removed afterwards; an environment with nothing
   but PATH/LANG; `-I` ignores PYTHON* variables and the user's site-packages.
3. No network where the platform allows: `unshare -n` (a network namespace with no interfaces; as root,
   or `unshare -rn` through a user namespace otherwise), checked cheaply on every call and skipped when
   unavailable.
4. Inside the child, before the candidate runs (a bootstrap passed with `-c`; done in the child rather than
   in `preexec_fn`, which is unsafe in a threaded harness, and evaluation runs checks from worker threads):
   rlimits (CPU seconds, 1 GiB address space, 10 MB file size, no core files, few file descriptors, and
   RLIMIT_NPROC 0, which stops fork for non-root users; root ignores it), then Landlock where the kernel
   has it (writes only inside the temporary directory, no TCP connect/bind, no signals to processes outside
   the sandbox: this is what stops a process running as root from writing or killing elsewhere).
5. Belt and braces at the Python level (defeatable by determined code, so never the only defence): the
   process-spawning and socket modules cannot be imported (`subprocess`, `multiprocessing`, `socket`,
   `ctypes`, ...), `os.fork`/`system`/`exec*`/`spawn*`/`kill`/`setsid` raise, and `open`/`os.open`/
   `os.remove`/... refuse to write outside the temporary directory.

A program passes only if it exits 0 AND the bootstrap then prints a per-run random marker, so code that
calls `exit(0)` / `os._exit(0)` before the tests ran does not pass (against honest mistakes; code that
inspects the bootstrap's frame could find the marker). The candidate runs with `__name__ ==
"__candidate__"`, so `if __name__ == "__main__":` blocks in completions do not run (as upstream).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lemon.bench.extract import humaneval_program

log = logging.getLogger(__name__)

Status = Literal["passed", "failed", "timeout", "error"]

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MEMORY_BYTES = 1 << 30
DEFAULT_FILE_BYTES = 10 << 20
MAX_DETAIL_CHARS = 2000

BLOCKED_MODULES = ("subprocess", "_posixsubprocess", "multiprocessing", "_multiprocessing", "socket",
                   "_socket", "ssl", "_ssl", "ctypes", "_ctypes", "pty")

# The child's first code. It receives its config as argv[1] (JSON) and the success marker on stdin.
_BOOTSTRAP = r'''
import builtins, io, json, os, posix, resource, sys, traceback
cfg = json.loads(sys.argv[1])
marker = sys.stdin.readline().strip()
root = os.path.realpath(cfg["root"])

def _limit(res, soft, hard):
    try:
        cur_soft, cur_hard = resource.getrlimit(res)
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        resource.setrlimit(res, (soft, hard))
    except (ValueError, OSError):
        pass

_limit(resource.RLIMIT_CPU, cfg["cpu_s"], cfg["cpu_s"] + 1)
_limit(resource.RLIMIT_AS, cfg["memory_bytes"], cfg["memory_bytes"])
_limit(resource.RLIMIT_FSIZE, cfg["file_bytes"], cfg["file_bytes"])
_limit(resource.RLIMIT_CORE, 0, 0)
_limit(resource.RLIMIT_NOFILE, 64, 64)
_limit(resource.RLIMIT_NPROC, 0, 0)

def _landlock():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    sc = libc.syscall
    sc.restype = ctypes.c_long
    abi = sc(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return 0
    fs = 0
    for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12):
        fs |= 1 << bit
    if abi >= 2: fs |= 1 << 13
    if abi >= 3: fs |= 1 << 14
    if abi >= 5: fs |= 1 << 15
    class Attr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]
    class Beneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]
    attr = Attr(fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    ruleset = sc(444, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    dfd = os.open(root, os.O_PATH | os.O_CLOEXEC)
    rule = Beneath(fs, dfd)
    ok = sc(445, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0)) == 0
    os.close(dfd)
    ok = ok and libc.prctl(38, 1, 0, 0, 0) == 0
    ok = ok and sc(446, ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0
    os.close(ruleset)
    return abi if ok else 0

try:
    landlock_abi = _landlock() if cfg["landlock"] else 0
except Exception:
    landlock_abi = 0

with open(os.path.join(root, "candidate.py"), encoding="utf-8") as fh:
    source = fh.read()

class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in cfg["blocked"]:
            raise ImportError(f"module {name!r} is not available in the sandbox")
        return None

for name in list(sys.modules):
    if name.split(".")[0] in cfg["blocked"]:
        del sys.modules[name]
sys.meta_path.insert(0, _Blocker())

def _deny(name):
    def denied(*args, **kwargs):
        raise PermissionError(f"os.{name} is not allowed in the sandbox")
    return denied

for mod in (os, posix):
    for name in ("fork", "forkpty", "system", "popen", "execv", "execve", "execl", "execle", "execlp",
                 "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv",
                 "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp", "kill", "killpg",
                 "setsid", "setpgid", "setpgrp", "register_at_fork"):
        if hasattr(mod, name):
            setattr(mod, name, _deny(name))

def _inside(path):
    if isinstance(path, int):
        return True
    p = os.fsdecode(os.fspath(path))
    real = os.path.realpath(p)
    return real == root or real.startswith(root + os.sep)

def _check(path, what):
    if not _inside(path):
        raise PermissionError(f"{what} outside the sandbox directory is not allowed: {path!r}")

_open = builtins.open
def _guarded_open(file, mode="r", *args, **kwargs):
    if any(c in mode for c in "wax+"):
        _check(file, "writing")
    return _open(file, mode, *args, **kwargs)
builtins.open = io.open = _guarded_open

_os_open = os.open
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
def _guarded_os_open(path, flags, *args, **kwargs):
    if flags & _WRITE:
        _check(path, "writing")
    return _os_open(path, flags, *args, **kwargs)
os.open = _guarded_os_open

def _guard_paths(name, n_paths):
    real = getattr(os, name, None)
    if real is None:
        return
    def guarded(*args, **kwargs):
        for p in args[:n_paths]:
            _check(p, f"os.{name}")
        return real(*args, **kwargs)
    setattr(os, name, guarded)

for name in ("remove", "unlink", "rmdir", "mkdir", "chmod", "chown", "lchown", "truncate", "utime", "mkfifo",
             "mknod"):
    _guard_paths(name, 1)
for name in ("rename", "replace", "link", "symlink"):
    _guard_paths(name, 2)

globals_ = {"__name__": "__candidate__", "__builtins__": builtins}
try:
    exec(compile(source, "candidate.py", "exec"), globals_)
except BaseException:
    try:
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(1)
try:
    sys.stdout.flush()
    sys.stderr.flush()
except BaseException:
    os._exit(1)
os.write(1, ("\n" + marker + "\n").encode())
os._exit(0)
'''


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of one program: `passed` iff `status == "passed"`; `detail` says why not."""

    passed: bool
    status: Status
    detail: str


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 when unavailable): asked, not enabled, in this process."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        abi = int(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return 0
    return max(abi, 0)


def network_prefix() -> list[str]:
    """The command prefix that gives the child an empty network namespace, or [] when none works here."""
    unshare = shutil.which("unshare")
    if not unshare or not sys.platform.startswith("linux"):
        return []
    options = (["-n"], ["-r", "-n"]) if os.geteuid() == 0 else (["-r", "-n"],)
    for opts in options:
        try:
            done = subprocess.run([unshare, *opts, "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=5, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return [unshare, *opts, "--"]
    return []


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _rmtree(path: str) -> None:
    def unlock(func: Any, p: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            os.chmod(p, stat.S_IRWXU)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=unlock)


def _tail(path: Path, limit: int = MAX_DETAIL_CHARS) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def run_program(
    code: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    file_bytes: int = DEFAULT_FILE_BYTES,
    isolate_network: bool = True,
    landlock: bool = True,
    python: str | None = None,
) -> SandboxResult:
    """Run `code` as a module in a sandboxed child process; passed iff it completes without an exception."""
    root: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    try:
        root = tempfile.mkdtemp(prefix="lemon-sandbox-")
        Path(root, "candidate.py").write_text(code, encoding="utf-8", errors="replace")
        marker = "LEMON-SANDBOX-DONE-" + secrets.token_hex(16)
        cfg = {"root": root, "cpu_s": max(1, math.ceil(timeout_s)) + 1, "memory_bytes": int(memory_bytes),
               "file_bytes": int(file_bytes), "landlock": landlock, "blocked": list(BLOCKED_MODULES)}
        prefix = network_prefix() if isolate_network else []
        cmd = [*prefix, python or sys.executable, "-I", "-B", "-c", _BOOTSTRAP, json.dumps(cfg)]
        env = {"PATH": "/usr/bin:/bin", "HOME": root, "TMPDIR": root, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        out_path, err_path = Path(root, "stdout.txt"), Path(root, "stderr.txt")
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=root, env=env,
                                    start_new_session=True, close_fds=True)
        assert proc.stdin is not None
        try:
            proc.stdin.write((marker + "\n").encode())
            proc.stdin.close()
        except OSError:
            pass
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            rc = proc.wait()
        _kill_group(proc.pid)
        stdout_tail = _tail(out_path, 4096)
        stderr_tail = _tail(err_path).strip()
    except OSError as exc:
        log.warning("sandbox could not run a program: %s", exc)
        return SandboxResult(False, "error", f"sandbox error: {type(exc).__name__}: {exc}")
    finally:
        if proc is not None and proc.returncode is None:
            _kill_group(proc.pid)
            proc.wait()
        if root is not None:
            _rmtree(root)
    if timed_out:
        return SandboxResult(False, "timeout", f"timed out after {timeout_s:g} s (process group killed)")
    if rc == 0 and marker in stdout_tail:
        return SandboxResult(True, "passed", "")
    if rc == -signal.SIGXCPU:
        return SandboxResult(False, "timeout", f"CPU time limit of {cfg['cpu_s']} s exceeded")
    if rc == 0:
        return SandboxResult(False, "failed", "exited before the program finished (early exit)")
    if rc < 0:
        return SandboxResult(False, "failed", f"killed by {_signal_name(rc)}; {stderr_tail[-500:]}".strip())
    last = stderr_tail.splitlines()[-1] if stderr_tail else f"exit code {rc}"
    return SandboxResult(False, "failed", last[:MAX_DETAIL_CHARS])


def run_humaneval(completion: str, item: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> SandboxResult:
    """Run a HumanEval completion (full function or body) against the item's tests in the sandbox."""
    meta = item.meta
    entry = meta["entry_point"]
    program = (humaneval_program(completion, meta["prompt"], entry) + "\n\n" + meta["test"]
               + f"\n\ncheck({entry})\n")
    return run_program(program, timeout_s)


def check_humaneval(completion_code: str, item: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether `completion_code` passes the item's HumanEval tests (`check(entry_point)` raises nothing)."""
    result = run_humaneval(completion_code, item, timeout_s)
    log.debug("%s: %s %s", getattr(item, "id", "?"), result.status, result.detail[:200])
    return result.passed
