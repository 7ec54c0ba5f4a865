"""The benchmarks LEMON knows by name: one line per benchmark, and the look-up every caller goes through.

Adding a benchmark: write one file beside the others holding one `Benchmark` (see `lemon.benchmarks.base`;
a `DataBenchmark` with an answer kind of `lemon.benchmarks.answers` is the short way) and add its line to
`BENCHMARKS`. A benchmark that lives outside this package needs no line here: name it by reference,
`package.module:OBJECT` (like `inspect eval file.py@task`), wherever a benchmark name is asked for
(`lemon eval my_pkg.toy:TOY`); the run records that reference as its benchmark.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType

from lemon.benchmarks.aqua import AQUA
from lemon.benchmarks.base import Benchmark, DataDir, Item
from lemon.benchmarks.gsm8k import GSM8K
from lemon.benchmarks.humaneval import HUMANEVAL
from lemon.benchmarks.mmlu import MMLU
from lemon.benchmarks.multiarith import MULTIARITH
from lemon.benchmarks.splits import load_split as _load_split
from lemon.benchmarks.svamp import SVAMP
from lemon.errors import LemonError

BENCHMARKS: Mapping[str, Benchmark] = MappingProxyType({
    "mmlu": MMLU,
    "gsm8k": GSM8K,
    "aqua": AQUA,
    "multiarith": MULTIARITH,
    "svamp": SVAMP,
    "humaneval": HUMANEVAL,
})


def get_benchmark(name: str) -> Benchmark:
    """The benchmark registered as `name`, or the one a `module:OBJECT` reference names; else a one-line error."""
    found = BENCHMARKS.get(name)
    if found is not None:
        return found
    if ":" in name:
        return _by_reference(name)
    raise LemonError(f"unknown benchmark {name!r}; valid: {', '.join(sorted(BENCHMARKS))} "
                     "(or module:OBJECT for one defined elsewhere)")


def _by_reference(ref: str) -> Benchmark:
    """The benchmark object `module:OBJECT` names, checked to have what the `Benchmark` protocol asks."""
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LemonError(f"benchmark {ref!r}: cannot import {module_name!r} ({exc})") from None
    bench = getattr(module, attr, None)
    missing = [m for m in ("name", "kind", "splits", "default_split", "load_source", "prompt", "extract", "check")
               if not hasattr(bench, m)]
    if bench is None or missing:
        raise LemonError(f"benchmark {ref!r}: {module_name} has no benchmark object {attr!r}"
                         + (f" (it lacks {', '.join(missing)})" if bench is not None else ""))
    return bench


def load_split(benchmark: str, split: str, data_dir: DataDir = None) -> list[Item]:
    """The items of `benchmark`/`split` (by name), in file order: `lemon.benchmarks.splits.load_split`."""
    return _load_split(get_benchmark(benchmark), split, data_dir)
