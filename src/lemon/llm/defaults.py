"""LEMON's defaults for worker calls: the one place `lemon.run`, every CLI command and `lemon eval` read them.

Why one module: the pool files carry defaults of their own (`temperature: 0.0`, the `tiny` pool's
`max_tokens: 128`), and a script that took them ran a different algorithm from the CLI on the same task: greedy
voters that always agree with each other and chains of thought cut mid-sentence. The CLI's options, the Python
API's keyword arguments and the evaluation harness's settings all default to these names.
"""

from __future__ import annotations

DEFAULT_POOL = "cpu"
"""The pool a run uses unless told otherwise: three small models installed from PyPI packages, on a CPU."""

DEFAULT_MAX_TOKENS = 384
"""One worker reply limit for run, exec, eval and explain. The `tiny` pool's own default (128) cut
chain-of-thought answers mid-sentence in `eval` while `run` and `exec` used 384 on the same pool."""

DEFAULT_TEMPERATURE = 0.7
"""Workers sample: a vote of greedy voters is one answer repeated (a stop rule then always fires on it)."""
