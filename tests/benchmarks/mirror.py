"""A real HTTP server on 127.0.0.1 for `lemon data fetch` tests: serves a folder with the data directory's
layout (a mirror), or misbehaves on purpose (a TEST DOUBLE mode: a body that never ends, a length that lies, a
server that stalls). It records every path asked for, so a test can tell that nothing was downloaded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Mirror:
    url: str
    mode: str = "files"
    requests: list[str] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)  # bytes each endless reply sent before the client cut it off


class _Handler(SimpleHTTPRequestHandler):
    mirror: Mirror

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows stderr on failure
        pass

    def do_GET(self) -> None:
        self.mirror.requests.append(self.path)
        mode = self.mirror.mode
        if mode == "files":
            super().do_GET()
        elif mode == "endless":
            self._endless()
        elif mode == "announce":  # a length far above any pinned file, then a few bytes
            self._head(200, {"Content-Length": str(1 << 30)})
            self.wfile.write(b"x" * 1000)
        elif mode == "stall":  # headers, then nothing for longer than the client waits between reads
            self.close_connection = True
            self._head(200, {"Content-Type": "application/octet-stream"})
            self.wfile.flush()
            time.sleep(3)

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def _endless(self) -> None:
        """A body without a length that goes on until the client hangs up (at most 256 MiB)."""
        self.close_connection = True
        self._head(200, {"Content-Type": "application/octet-stream"})
        sent, chunk = 0, b"y" * (1 << 16)
        try:
            while sent < (256 << 20):
                self.wfile.write(chunk)
                sent += len(chunk)
        except OSError:
            pass
        self.mirror.sent.append(sent)


@contextmanager
def serve_folder(folder: Path, mode: str = "files") -> Iterator[Mirror]:
    """Serve `folder` at `http://127.0.0.1:PORT` in a thread for the duration of the block."""
    mirror = Mirror("")
    handler = type("Handler", (_Handler,), {"mirror": mirror})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(folder)))
    server.daemon_threads = True
    mirror.url = f"http://127.0.0.1:{server.server_address[1]}"
    mirror.mode = mode
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield mirror
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
