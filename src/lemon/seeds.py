"""The one seed-derivation recipe of LEMON: a 31-bit integer from the sha256 of the parts.

Every seeded choice (worker sampling per item and agent, task order, rollout choices) derives its seed from
named parts with this function, so the same parts give the same seed in every process and on every
platform, and no code needs global random state.
"""

from __future__ import annotations

import hashlib


def stable_seed(*parts: object) -> int:
    """sha256 over the parts joined by NUL, first 4 bytes, as a non-negative 31-bit int."""
    digest = hashlib.sha256("\x00".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
