"""LEMON's public Python API: what `import lemon` offers, and what the `lemon` command calls.

Why a layer of its own: the use cases (`lemon run`, `lemon exec`, `lemon eval`, `lemon explain`) lived in the
CLI, so a script built from the layers below ran a different algorithm (greedy voters, short replies, votes over
whole texts) and stored its evaluations under other run ids. They live here, with LEMON's defaults
(`lemon.llm.defaults`), and the CLI only parses options and renders what these return. Everything under
`lemon.` other than these names is private by convention (the layers' contracts: docs/architecture.md).
"""

from lemon.api.eval import aevaluate, evaluate
from lemon.api.session import Result, RunObserver, TraceNotSaved, aexecute, arun, execute, load_pool, run
from lemon.api.spec import Spec
from lemon.api.traces import aexplain, explain, read_trace
from lemon.runtime.trace import Trace

__all__ = ["Result", "RunObserver", "Spec", "Trace", "TraceNotSaved", "aevaluate", "aexecute", "aexplain", "arun",
           "evaluate", "execute", "explain", "load_pool", "read_trace", "run"]
