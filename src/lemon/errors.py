"""User-facing errors.

Every error a person can cause (bad spec, missing model, unreachable endpoint, exhausted budget) is a
`LemonError` whose message is ONE line naming the problem and the fix. The CLI prints it and exits 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


class LemonError(Exception):
    """An error caused by input or environment, with a one-line actionable message."""

    exit_code = 2


class SpecError(LemonError):
    """A spec that cannot be parsed, violates the bounds, or does not validate."""


class ModelFileError(LemonError):
    """A model file that is missing or whose sha256 does not match its pin."""


class BackendError(LemonError):
    """A model backend that cannot be reached or that failed after retries."""


class ConfigError(LemonError):
    """A pool or training configuration file that is missing or malformed."""


class DataError(LemonError):
    """A benchmark data file that is missing or malformed."""


class StorageError(LemonError):
    """A file or folder LEMON writes (results store, LLM cache, traces, LEMON_HOME) that cannot be created,
    belongs to another program, or is damaged; the message names the file and how to move it aside."""


class TraceError(LemonError):
    """A saved or stored trace that this LEMON cannot read (a newer format version); the message names the trace
    and the fix."""


def run_script(main: Callable[[], object]) -> None:
    """Run the `main` of a script in experiments/ or benchmarks/ as the CLI runs a command: a LemonError (a
    missing data folder, a store without the run) ends it with its one line on stderr and exit code 2 instead of a
    traceback; an int that `main` returns is the exit status."""
    try:
        status = main()
    except LemonError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(exc.exit_code) from None
    raise SystemExit(status if isinstance(status, int) else 0)
