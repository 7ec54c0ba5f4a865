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


@contextmanager
def scripted_http_server(replies: list[tuple[int, bytes, float]]) -> Iterator[tuple[str, list[dict]]]:
    """A TEST DOUBLE of an OpenAI-compatible endpoint on 127.0.0.1: the i-th POST gets `replies[i]`
    (status, body, delay in seconds; the last reply repeats). Yields the base URL and the JSON bodies
    received, so a test can check what was sent and how often."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
            status, body, delay = replies[min(len(received), len(replies)) - 1]
            time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", received
    finally:
        server.shutdown()
        server.server_close()
