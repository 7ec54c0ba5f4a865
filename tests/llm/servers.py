"""Starting a real `llama_cpp.server` on 127.0.0.1 for tests, and stopping it after."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def llama_server(model: Path, *, startup_s: float = 120.0) -> Iterator[str]:
    """Yield the base URL (`http://127.0.0.1:PORT/v1`) of a real llama.cpp server serving `model`."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    # The server logs a lot (model metadata): to a file, since a full pipe would block it.
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "2048", "--n_threads", "2"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + startup_s
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"llama_cpp.server exited: {log.read().decode(errors='replace')[-2000:]}")
                try:
                    with urllib.request.urlopen(f"{base}/models", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("llama_cpp.server did not start in time")
                time.sleep(0.5)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
