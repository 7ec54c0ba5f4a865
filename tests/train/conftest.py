"""Shared fixtures for training tests: the real default policy, converted once per machine and cached.

The conversion (GGUF -> safetensors under LEMON_HOME) takes ~30 s the first time; afterwards loading is
well under a second. Only tests marked ``train`` use these fixtures.
"""

from __future__ import annotations

import os

# Before any test module imports torch: spin-waiting OpenMP threads are catastrophically slow on a shared
# 2-core machine (see lemon/train/__init__.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def policy_dir() -> Path:
    from lemon.train.policy import ensure_default_policy

    return ensure_default_policy()


@pytest.fixture(scope="session")
def tokenizer(policy_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(policy_dir))


@pytest.fixture(scope="session")
def policy(policy_dir: Path) -> Iterator[tuple[Any, Any]]:
    import torch

    from lemon.train.policy import load_policy

    # The build machine has 2 cores shared by several jobs; more threads only add contention.
    old = torch.get_num_threads()
    torch.set_num_threads(min(old, 2))
    model, tok = load_policy(str(policy_dir))
    model.eval()  # no dropout: gradients must be deterministic for exact-zero checks
    yield model, tok
    torch.set_num_threads(old)
