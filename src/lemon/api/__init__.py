"""LEMON's public Python API: what `import lemon` offers, and what the `lemon` command calls.

Why a layer of its own: the use cases (`lemon run`, `lemon exec`, ...) lived in the CLI, so a script built from
the layers below ran a different algorithm (greedy voters, short replies, votes over whole texts). They live
here, with LEMON's defaults, and the CLI only parses options and renders what these return. Everything under
`lemon.` other than these names is private by convention (the layers' contracts: docs/architecture.md).
"""

from lemon.api.session import (
    Result,
    RunObserver,
    RunSettings,
    TraceNotSaved,
    aexecute,
    arun,
    execute,
    load_pool,
    run,
)
from lemon.api.spec import Spec

__all__ = ["Result", "RunObserver", "RunSettings", "Spec", "TraceNotSaved", "aexecute", "arun", "execute",
           "load_pool", "run"]
