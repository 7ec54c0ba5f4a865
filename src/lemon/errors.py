"""User-facing errors.

Every error a person can cause (bad spec, missing model, unreachable endpoint, exhausted budget) is a
`LemonError` whose message is ONE line naming the problem and the fix. The CLI prints it and exits 2;
anything else is a bug and keeps its traceback.
"""


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
