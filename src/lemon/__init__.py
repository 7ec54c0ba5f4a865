"""LEMON: learning executable multi-agent orchestration.

The package folders are the pipeline, in import order (nothing imports "up"):
spec -> llm -> runtime -> orchestrator -> bench -> train, with a thin cli on top.
"""

from lemon.errors import LemonError

__all__ = ["LemonError"]
__version__ = "0.1.0"
