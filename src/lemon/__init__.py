"""LEMON: learning executable multi-agent orchestration.

The package folders are the pipeline, in import order (nothing imports "up"):
spec -> llm -> sandbox -> runtime -> orchestrator -> benchmarks -> evaluation -> train -> inspection, with a
thin cli on top.

Importing LEMON sets ``OMP_WAIT_POLICY=PASSIVE`` unless it is already set; it has to happen before an OpenMP
runtime starts (llama.cpp's and torch's both use one). Several llama.cpp models (one per capacity level) and
torch share a few cores here, and spin-waiting threads then starve each other: measured on 2 shared cores,
SmolLM2 generated 22-27 tok/s with the default policy and 41-46 tok/s with PASSIVE, and HF generation of
2x96 tokens took 340 s instead of 16 s.
"""

import os

from lemon.errors import LemonError

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["LemonError"]
__version__ = "0.1.0"
