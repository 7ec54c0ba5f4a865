"""Run `lemon ARGS...` in this process and report whether anything imported `llama_cpp` (started by
tests/train/test_served_workers.py). A meta-path finder sees every import attempt of `llama_cpp` or one of
its modules (successful or not) before any other finder; it only records, it never blocks."""

from __future__ import annotations

import sys
from typing import Any, ClassVar


class Watch:
    seen: ClassVar[list[str]] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "llama_cpp" or name.startswith("llama_cpp."):
            Watch.seen.append(name)


def main() -> int:
    sys.meta_path.insert(0, Watch())
    sys.argv = ["lemon", *sys.argv[1:]]
    from lemon.cli.main import main as lemon

    code: Any = 0
    try:
        lemon()
    except SystemExit as exc:
        code = exc.code
    print(f"LLAMA_CPP_IMPORTS={sorted(set(Watch.seen))} LOADED={'llama_cpp' in sys.modules}", flush=True)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
