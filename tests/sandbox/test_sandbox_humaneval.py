"""Exact HumanEval scoring: every upstream canonical solution passes, correct code may use the standard
library, and the cheats of the issue 12 probe are scored failed."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lemon.benchmarks.base import Item
from lemon.benchmarks.humaneval import check_humaneval, run_humaneval
from lemon.benchmarks.registry import load_split

CORES = 2  # CI's


@pytest.fixture(scope="module")
def items(data_dir: Path) -> dict[str, Item]:
    return {item.id: item for item in load_split("humaneval", "all", data_dir)}


def test_all_164_canonical_solutions_pass(items: dict[str, Item]) -> None:
    assert len(items) == 164
    start = time.monotonic()
    with ThreadPoolExecutor(CORES) as pool:
        outcomes = pool.map(lambda item: run_humaneval(item.meta["canonical_solution"], item, timeout_s=30.0),
                            items.values())
        results = dict(zip(items, outcomes, strict=True))
    failed = {tid: r.detail for tid, r in results.items() if not r.passed}
    assert failed == {}, failed
    print(f"164 canonical solutions in {time.monotonic() - start:.1f} s")


def test_a_full_function_completion_passes_and_a_wrong_one_fails_with_the_reason(items: dict[str, Item]) -> None:
    item = items["HumanEval/0"]
    assert check_humaneval(item.meta["prompt"] + item.meta["canonical_solution"], item)
    wrong = run_humaneval("    return None\n", item)
    assert wrong.status == "failed" and "AssertionError" in wrong.detail
    broken = run_humaneval("    return (\n", item)
    assert broken.status == "failed" and "SyntaxError" in broken.detail
    raising = run_humaneval("    raise ValueError('no idea')\n", item)
    assert raising.status == "failed" and "ValueError: no idea" in raising.detail


ADD = "HumanEval/53"  # add(x, y); its tests `import random`, as do those of /32, /38 and /50
STDLIB_ADD = {
    "statistics": "import statistics\ndef add(x, y):\n    return round(statistics.fmean([x, y]) * 2)\n",
    "logging": "import logging\nlog = logging.getLogger('add')\ndef add(x, y):\n    log.debug('add')\n"
               "    return x + y\n",
    "threading": "import threading\ndef add(x, y):\n    out = []\n"
                 "    t = threading.Thread(target=lambda: out.append(x + y))\n    t.start()\n    t.join()\n"
                 "    return out[0]\n",
    "queue": "import queue\ndef add(x, y):\n    q = queue.Queue()\n    q.put(x + y)\n    return q.get()\n",
    "concurrent.futures": "import operator\nfrom concurrent.futures import ThreadPoolExecutor\n"
                          "def add(x, y):\n    with ThreadPoolExecutor(4) as ex:\n"
                          "        return ex.submit(operator.add, x, y).result()\n",
    "tempfile": "import os, tempfile\ndef add(x, y):\n    with tempfile.TemporaryDirectory() as d:\n"
                "        p = os.path.join(d, 'n')\n        open(p, 'w').write(str(x + y))\n"
                "        return int(open(p).read())\n",
    "secrets": "import secrets\ndef add(x, y):\n    secrets.token_hex(4)\n    return x + y\n",
    "asyncio": "import asyncio\ndef add(x, y):\n    async def go():\n        await asyncio.sleep(0)\n"
               "        return x + y\n    return asyncio.run(go())\n",
    "random": "import random\ndef add(x, y):\n    random.random()\n    return x + y\n",
}


@pytest.mark.parametrize("module", sorted(STDLIB_ADD))
def test_correct_code_using_the_standard_library_passes(module: str, items: dict[str, Item]) -> None:
    result = run_humaneval(STDLIB_ADD[module], items[ADD], timeout_s=20.0)
    assert result.passed, result.detail


CHEATS = {
    "__eq__ always True": "class Liar:\n    def __eq__(self, other):\n        return True\n"
                          "    def __ne__(self, other):\n        return False\n    __hash__ = object.__hash__\n"
                          "def has_close_elements(numbers, threshold):\n    return Liar()\n",
    "int subclass whose __eq__ is True": "class Liar(int):\n    def __eq__(self, other):\n        return True\n"
                                         "    __hash__ = int.__hash__\n"
                                         "def has_close_elements(numbers, threshold):\n    return Liar(0)\n",
    "steal the success marker": (
        "import gc, os, sys\nfound = set()\nframe = sys._getframe()\n"
        "while frame is not None:\n"
        "    for ns in (frame.f_globals, frame.f_locals):\n"
        "        found.update(v for v in list(ns.values()) if isinstance(v, str))\n"
        "    frame = frame.f_back\n"
        "import __main__\nfound.update(v for v in vars(__main__).values() if isinstance(v, str))\n"
        "for obj in gc.get_objects():\n"
        "    if isinstance(obj, dict):\n"
        "        found.update(v for v in list(obj.values()) if isinstance(v, str) and len(v) == 32)\n"
        "for text in found:\n"
        "    os.write(1, ('\\n' + text + '\\n').encode())\n"
        "    for fd in range(3, 64):\n"
        "        try:\n            os.write(fd, text.encode())\n        except OSError:\n            pass\n"
        "os._exit(0)\n"),
    "exit 0 before the tests": "import os\nos._exit(0)\n",
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheats_are_scored_failed(name: str, items: dict[str, Item]) -> None:
    """On has_close_elements, whose tests compare with `== True` / `== False` and import nothing."""
    result = run_humaneval(CHEATS[name], items["HumanEval/0"])
    assert not result.passed and result.status == "failed", result


def test_redefining_a_helper_the_tests_use_does_not_pass(items: dict[str, Item]) -> None:
    """HumanEval/32 checks find_zero with the prompt's `poly`; a completion that redefines `poly` to always
    return 0 passes upstream's harness (tests appended to the completion) but not here."""
    cheat = "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 0.0\n"
    assert not check_humaneval(cheat, items["HumanEval/32"])


def test_a_candidate_that_never_answers_times_out(items: dict[str, Item]) -> None:
    start = time.monotonic()
    result = run_humaneval("def add(x, y):\n    while True:\n        pass\n", items[ADD], timeout_s=1.0)
    assert result.status == "timeout" and time.monotonic() - start < 10.0
