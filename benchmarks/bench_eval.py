"""P7: evaluation throughput with concurrency 8 vs serial, against a real HTTP OpenAI-compatible test double.

The server is a deliberately dumb stand-in for a remote model (named as what it is: a TEST DOUBLE): a
ThreadingHTTPServer on 127.0.0.1 answering POST /v1/chat/completions after a fixed 50 ms sleep, with usage
fields. A pool YAML points every level at it (openai backend, concurrency 8), and `evaluate` runs the same
32 MultiArith items with the `vanilla` method serially and with `--concurrency 8`. Everything real except
the model: HTTP client, pool, executor, extraction, checker, SQLite store with the traces.

Prints exactly one line, `P7 <ratio>  throughput concurrency 8 / serial, target >= 6.4`; details are logged.
Run: `python benchmarks/bench_eval.py [--items 32] [--latency 0.05] [--data-dir DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import statistics
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger("bench_eval")

TARGET = 6.4
REPLY = "Adding the numbers step by step. The answer is 42."


def make_handler(latency_s: float) -> type[BaseHTTPRequestHandler]:
    """A handler class serving a fixed chat completion after `latency_s` seconds."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like a real endpoint
        # Headers and body go out as two writes; without TCP_NODELAY, Nagle + delayed ACK stall each reply
        # ~40 ms (real servers such as uvicorn set it too).
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            request = json.loads(body or b"{}")
            time.sleep(latency_s)
            prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in request.get("messages", []))
            completion_tokens = len(REPLY.split())
            self._send(200, {
                "id": "chatcmpl-double", "object": "chat.completion", "created": int(time.time()),
                "model": request.get("model", "double"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY},
                             "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens},
            })

        def do_GET(self) -> None:
            self._send(200, {"object": "list", "data": [{"id": "double", "object": "model"}]})

        def _send(self, status: int, payload: dict[str, object]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("double: " + format, *args)

    return Handler


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: eight clients connecting at once overflow it, a SYN is
    # dropped and that connection stalls for the 1 s SYN retransmit (real servers use 2048).
    request_queue_size = 128


def _serve(latency_s: float, port: Any) -> None:
    httpd = _Server(("127.0.0.1", 0), make_handler(latency_s))
    httpd.daemon_threads = True
    port.value = httpd.server_address[1]
    httpd.serve_forever()


class DoubleServer:
    """The test-double server on an ephemeral 127.0.0.1 port, in its OWN process (like a real endpoint: its
    threads must not compete with the harness for the GIL)."""

    def __init__(self, latency_s: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._port = ctx.Value("i", 0)
        self.proc = ctx.Process(target=_serve, args=(latency_s, self._port), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port.value}/v1"

    def __enter__(self) -> DoubleServer:
        self.proc.start()
        deadline = time.monotonic() + 30
        while not self._port.value:
            if time.monotonic() > deadline or not self.proc.is_alive():
                raise RuntimeError("the test-double server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.join(10)


def write_pool(path: Path, base_url: str, concurrency: int) -> Path:
    levels = "\n".join(
        f"  - {{name: {name}, backend: openai, base_url: \"{base_url}\", model: double, "
        f"api_key_env: LEMON_BENCH_DOUBLE_KEY, concurrency: {concurrency}, timeout_s: 30}}"
        for name in ("small", "medium", "large")
    )
    path.write_text(f"name: http-double\ndefaults: {{temperature: 0.0, max_tokens: 32}}\nlevels:\n{levels}\n")
    return path


async def timed_eval(pool: Path, store: Path, *, items: int, concurrency: int, data_dir: str | None) -> float:
    import lemon

    start = time.perf_counter()
    summary = await lemon.aevaluate("multiarith", "vanilla", limit=items, pool=pool, level="medium", temperature=0.0,
                                    cache=False, store=store, data_dir=data_dir, concurrency=concurrency)
    wall = time.perf_counter() - start
    assert summary.computed == items, summary
    log.info("concurrency %d: %d items in %.2fs (%.1f items/s), accuracy %.2f", concurrency, items, wall,
             items / wall, summary.stats.accuracy_mean)
    return wall


async def main_async(args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory(prefix="lemon-p7-") as tmp, DoubleServer(args.latency) as server:
        tmpdir = Path(tmp)
        os.environ["LEMON_HOME"] = str(tmpdir / "home")
        os.environ.setdefault("LEMON_BENCH_DOUBLE_KEY", "test-double")
        pool = write_pool(tmpdir / "pool.yaml", server.base_url, concurrency=8)
        log.info("test double at %s, %.0f ms per call", server.base_url, args.latency * 1000)
        await timed_eval(pool, tmpdir / "warmup.sqlite", items=4, concurrency=4, data_dir=args.data_dir)
        # Alternate serial and concurrent runs and take the median ratio: the machine is shared and noisy.
        ratios = []
        for r in range(args.repeats):
            serial = await timed_eval(pool, tmpdir / f"serial{r}.sqlite", items=args.items, concurrency=1,
                                      data_dir=args.data_dir)
            parallel = await timed_eval(pool, tmpdir / f"c8-{r}.sqlite", items=args.items, concurrency=8,
                                        data_dir=args.data_dir)
            ratios.append(serial / parallel)
        log.info("ratios: %s", ", ".join(f"{x:.2f}" for x in ratios))
        return statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per call of the test double")
    parser.add_argument("--data-dir", default=os.environ.get("LEMON_DATA_DIR")
                        or str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    ratio = asyncio.run(main_async(args))
    print(f"P7 {ratio:.2f}  throughput concurrency 8 / serial, target >= {TARGET}")


if __name__ == "__main__":
    main()
