"""Starting a real `llama_cpp.server` on 127.0.0.1 for tests, and stopping it after."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def built_llama_server() -> Path:
    """The README's test command builds it (experiments/build_llama_server.sh, idempotent): its path."""
    script = Path(__file__).parents[2] / "experiments" / "build_llama_server.sh"
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=1800, check=True)
    return Path(res.stdout.strip().splitlines()[-1])


def wait_until_answers(url: str, proc: subprocess.Popen[Any], log: Callable[[], str], timeout_s: float) -> None:
    """Until `url` answers HTTP 200 (a server a test started is up); its process exiting first, or `timeout_s`
    passing, fails the test with the end of its log (`log()`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited {proc.returncode}:\n{log()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer within {timeout_s:.0f} s:\n{log()[-3000:]}")
        time.sleep(0.5)


def stop_process(proc: subprocess.Popen[Any], grace_s: float = 20) -> None:
    """Terminate, wait, kill if it will not go."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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

        def text() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")

        try:
            wait_until_answers(f"{base}/models", proc, text, startup_s)
            yield base
        finally:
            stop_process(proc)


@contextmanager
def lemon_serve(args: list[str], env: Mapping[str, str], *, startup_s: float = 240,
                preexec: Callable[[], None] | None = None) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """`lemon serve ARGS` as a user runs it, with `env`, until it prints its 'served pool' line (the test fails
    if it does not); yields the process and the lines it printed. The test stops it (a signal, to check how it
    stops); one still running on leaving is killed."""
    proc = subprocess.Popen([sys.executable, "-m", "lemon.cli.main", "serve", *args], env={**env, "COLUMNS": "200"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            preexec_fn=preexec)
    try:
        lines: list[str] = []
        deadline = time.monotonic() + startup_s
        while not any(line.startswith("served pool:") for line in lines) and time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line and proc.poll() is not None:
                break
            lines.append(line)
        if not any(line.startswith("served pool:") for line in lines):
            proc.kill()
            raise AssertionError([*lines, proc.stderr.read()])  # type: ignore[union-attr]
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that speaks HTTP/1.1 (keep-alive, as the OpenAI clients expect) and writes no access
    log line per request (they would bury a failing test's output)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer,
            poll_interval: float = 0.5) -> Iterator[ThreadingHTTPServer]:
    """`handler` behind a real threaded HTTP server on a free port of 127.0.0.1, served from a daemon thread
    and shut down after; yields the server (`root_url(server)` is its address), so every test double starts
    and stops its server the same way."""
    server = server_class(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_interval}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def root_url(server: ThreadingHTTPServer) -> str:
    """`http://127.0.0.1:PORT` of a server started by `serving`."""
    return f"http://127.0.0.1:{server.server_address[1]}"


@contextmanager
def scripted_http_server(replies: list[tuple[int, bytes, float]]) -> Iterator[tuple[str, list[dict]]]:
    """A TEST DOUBLE of an OpenAI-compatible endpoint on 127.0.0.1: the i-th POST gets `replies[i]`
    (status, body, delay in seconds; the last reply repeats). Yields the base URL and the JSON bodies
    received, so a test can check what was sent and how often."""
    received: list[dict] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
            status, body, delay = replies[min(len(received), len(replies)) - 1]
            time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving(Handler) as server:
        yield f"{root_url(server)}/v1", received


# ---- a fault-injecting OpenAI-compatible endpoint -----------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One reply of the fault server: HTTP status, body (bytes, or a zero-argument callable returning an
    iterator of chunks, sent chunked and generated lazily so a huge body costs no memory), extra headers, and
    a delay before replying (a "hang" when longer than the client's timeout)."""

    status: int = 200
    body: bytes | Callable[[], Iterator[bytes]] = b""
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0


def completion(content: object = "The answer is 4.", usage: object = None, *, raw_usage: str | None = None) -> bytes:
    """A chat-completion body with `content` and `usage` (default: valid counts); `raw_usage` is pasted in as
    is, for what JSON encoders refuse to write (NaN)."""
    usage_text = raw_usage if raw_usage is not None else json.dumps(
        usage if usage is not None else {"prompt_tokens": 9, "completion_tokens": 5})
    message = json.dumps({"role": "assistant", "content": content})
    return (f'{{"choices":[{{"index":0,"message":{message},"finish_reason":"stop"}}],'
            f'"usage":{usage_text}}}').encode()


def huge_completion(total_bytes: int) -> Callable[[], Iterator[bytes]]:
    """A VALID chat completion whose content makes it `total_bytes` long, generated chunk by chunk."""

    def chunks() -> Iterator[bytes]:
        head, tail = b'{"choices":[{"message":{"content":"', b'"}}]}'
        yield head
        left = total_bytes - len(head) - len(tail)
        block = b"a" * (1 << 16)
        while left > 0:
            yield block[:left]
            left -= len(block)
        yield tail

    return chunks


# Replies that are valid JSON of the wrong shape, or not what they claim (the probe's list).
WRONG_SHAPES: dict[str, bytes] = {
    "content_list": completion([{"type": "text", "text": "4"}]),
    "content_number": completion(4),
    "missing_choices": b'{"usage": {"prompt_tokens": 1, "completion_tokens": 1}}',
    "empty_choices": b'{"choices": []}',
    "choice_not_object": b'{"choices": ["4"]}',
    "message_missing": b'{"choices": [{"finish_reason": "stop"}]}',
    "usage_nan": completion(raw_usage='{"prompt_tokens": NaN, "completion_tokens": 1}'),
    "usage_infinity": completion(raw_usage='{"prompt_tokens": 1, "completion_tokens": Infinity}'),
    "usage_negative": completion(usage={"prompt_tokens": 5, "completion_tokens": -1000005}),
    "usage_string": completion(usage={"prompt_tokens": "7", "completion_tokens": 1}),
    "usage_fraction": completion(usage={"prompt_tokens": 7.5, "completion_tokens": 1}),
    "usage_bool": completion(usage={"prompt_tokens": True, "completion_tokens": 1}),
    "usage_huge": completion(raw_usage='{"prompt_tokens": 1e300, "completion_tokens": 1}'),
    "usage_digits": completion(raw_usage='{"prompt_tokens": ' + "9" * 5000 + ', "completion_tokens": 1}'),
    "usage_list": completion(usage=[1, 2]),
    "top_level_list": b'[{"choices": []}]',
    "finish_reason_number": b'{"choices": [{"message": {"content": "4"}, "finish_reason": 3}]}',
}


@dataclass
class FaultEndpoint:
    """What a test sees of the fault server: its URL, every request (arrival time, JSON body), and how many
    bytes of lazily generated bodies it managed to write before the client hung up."""

    base_url: str
    received: list[tuple[float, dict]] = field(default_factory=list)
    chunked_bytes_sent: int = 0


class _QuietServer(ThreadingHTTPServer):
    """Threaded, and silent about clients that hang up (which is the point of several faults)."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@contextmanager
def fault_server(pick: Callable[[dict, int], Fault]) -> Iterator[FaultEndpoint]:
    """A FAULT-INJECTING TEST DOUBLE of an OpenAI-compatible endpoint on 127.0.0.1: request n (0-based) with
    JSON body `b` is answered with `pick(b, n)`."""
    endpoint = FaultEndpoint("")
    received = endpoint.received
    lock = threading.Lock()
    stop = threading.Event()

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            with lock:
                n = len(received)
                received.append((time.monotonic(), body))
            fault = pick(body, n)
            if fault.delay_s and stop.wait(fault.delay_s):
                self.close_connection = True
                return
            try:
                self._reply(fault)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client hung up (as it should on a huge body), or we did

        def _reply(self, fault: Fault) -> None:
            self.send_response(fault.status)
            self.send_header("Content-Type", "application/json")
            for k, v in fault.headers:
                self.send_header(k, v)
            if isinstance(fault.body, bytes):
                self.send_header("Content-Length", str(len(fault.body)))
                self.end_headers()
                self.wfile.write(fault.body)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in fault.body():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                with lock:
                    endpoint.chunked_bytes_sent += len(chunk)
            self.wfile.write(b"0\r\n\r\n")

    with serving(Handler, _QuietServer, poll_interval=0.05) as server:
        endpoint.base_url = f"{root_url(server)}/v1"
        try:
            yield endpoint
        finally:
            stop.set()  # wakes the handlers still delaying, before the server stops


# ---- a raw-socket endpoint, for replies that are not HTTP at all ---------------------------------------------


@dataclass
class RawEndpoint:
    """What a test sees of the raw server: its URL and every request's JSON body, in arrival order."""

    base_url: str
    received: list[dict] = field(default_factory=list)


def _read_request(conn: socket.socket) -> bytes:
    """One HTTP request's body (headers read up to the blank line, then Content-Length bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return b""
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        more = conn.recv(65536)
        if not more:
            break
        body += more
    return body


@contextmanager
def raw_http_server(pick: Callable[[dict, int], bytes]) -> Iterator[RawEndpoint]:
    """A RAW-SOCKET TEST DOUBLE of an endpoint on 127.0.0.1: request n (0-based) with JSON body `b` (GETs: {})
    gets the bytes `pick(b, n)` as they are, then the connection is closed: a broken status line, a header
    larger than any client reads, a redirect anywhere."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.05)
    endpoint = RawEndpoint(f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    raw = _read_request(conn)
                    body = json.loads(raw) if raw else {}
                    if raw:
                        endpoint.received.append(body)
                    conn.sendall(pick(body, len(endpoint.received) - 1))
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        stop.set()
        thread.join()
        listener.close()


def http_reply(status_line: bytes, body: bytes = b"", headers: tuple[bytes, ...] = ()) -> bytes:
    """A raw HTTP/1.1 reply: the status line as given (broken, if the test wants), headers, body."""
    head = [status_line, *headers, b"Content-Length: %d" % len(body), b"Connection: close"]
    return b"\r\n".join(head) + b"\r\n\r\n" + body
