"""LEMON: learning executable multi-agent orchestration.

The Python API (each name's `help()` says what it takes and returns; the `lemon` command calls the same):

    import lemon

    result = lemon.run("TASK")              # answer a task: an orchestrator writes a spec, the runtime runs it
    result.answer, result.tokens            # the extracted answer and what it cost (orchestrator included)
    print(result.trace)                     # the orchestration trace, saved (`lemon view` reads it)
    spec = lemon.Spec.parse(text)           # a spec from YAML or JSON, checked; str(spec) is its canonical form
    lemon.execute(spec, "TASK")             # run a spec you wrote (`lemon exec`)
    pool = lemon.load_pool("cpu")           # capacity levels -> models, reusable across calls
    lemon.evaluate("gsm8k", "template", limit=20)   # a method on a benchmark, stored and resumable (`lemon eval`)
    lemon.read_trace(result.trace_path)     # a saved trace, typed (`lemon.Trace`), by path or id
    lemon.explain(spec, "TASK")             # what each single-field edit of a run's spec changes (`lemon explain`)

`run` and `execute` use the CLI's defaults (`lemon.llm.defaults`): workers sampled at temperature 0.7 with
384-token replies on every pool, votes compared by the answer of the task's kind, the template orchestrator,
the LLM cache on. Async code awaits `arun`, `aexecute`, `aevaluate`, `aexplain`. Everything else in the package
is private by convention: the layers below (spec -> llm -> sandbox -> runtime -> orchestrator -> benchmarks ->
evaluation -> train -> inspection -> api, with a thin cli on top) keep their contracts in docs/architecture.md.

The API loads on first use of one of its names: `import lemon` alone stays light.

Importing LEMON sets ``OMP_WAIT_POLICY=PASSIVE`` unless it is already set; it has to happen before an OpenMP
runtime starts (llama.cpp's and torch's both use one). Several llama.cpp models (one per capacity level) and
torch share a few cores here, and spin-waiting threads then starve each other: measured on 2 shared cores,
SmolLM2 generated 22-27 tok/s with the default policy and 41-46 tok/s with PASSIVE, and HF generation of
2x96 tokens took 340 s instead of 16 s.
"""

import os
from typing import TYPE_CHECKING

from lemon.errors import LemonError

if TYPE_CHECKING:  # a type checker reads the API's own signatures; at run time `__getattr__` imports it lazily
    from lemon.api import Result as Result
    from lemon.api import RunObserver as RunObserver
    from lemon.api import Spec as Spec
    from lemon.api import Trace as Trace
    from lemon.api import TraceNotSaved as TraceNotSaved
    from lemon.api import aevaluate as aevaluate
    from lemon.api import aexecute as aexecute
    from lemon.api import aexplain as aexplain
    from lemon.api import arun as arun
    from lemon.api import evaluate as evaluate
    from lemon.api import execute as execute
    from lemon.api import explain as explain
    from lemon.api import load_pool as load_pool
    from lemon.api import read_trace as read_trace
    from lemon.api import run as run

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

#: The public API: `lemon.api`'s names, loaded on first use.
API = ("Result", "RunObserver", "Spec", "Trace", "TraceNotSaved", "aevaluate", "aexecute", "aexplain", "arun",
       "evaluate", "execute", "explain", "load_pool", "read_trace", "run")
__all__ = ["LemonError", *API]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`lemon.run` and the rest of the API, imported from `lemon.api` when first asked for."""
    if name in API:
        from lemon import api

        return getattr(api, name)
    raise AttributeError(f"module 'lemon' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and the API's (`dir(lemon)`, `help(lemon)`), though the API is not imported yet."""
    return sorted({*globals(), *API})
