"""The one seed-derivation recipe of LEMON: a 31-bit integer from the sha256 of the parts.

Every seeded choice (worker sampling per item and agent, task order, rollout choices) derives its seed from
named parts with this function, so the same parts give the same seed in every process and on every
platform, and no code needs global random state.
"""

from __future__ import annotations

import hashlib

#: The largest seed a command takes: `stable_seed`'s own range (31 bits), so every seed LEMON derives can be
#: passed back, and no value reaches a backend, SQLite or torch that they cannot hold (`--seed 10**23` was an
#: OverflowError traceback).
MAX_SEED = 0x7FFFFFFF
#: The most replicates one evaluation asks for (`lemon eval --seeds K`): a paper table has 3 to 5; the plan
#: holds every seed, and `--seeds 1000000000` took all memory before it was refused.
MAX_SEEDS = 1000


def stable_seed(*parts: object) -> int:
    """sha256 over the parts joined by NUL, first 4 bytes, as a non-negative 31-bit int."""
    digest = hashlib.sha256("\x00".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & MAX_SEED
