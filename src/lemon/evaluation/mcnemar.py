"""The exact McNemar test: every paired comparison of the report (a cell against another, or rows pooled over
benchmarks, `pooled.py`) asks it here."""

from __future__ import annotations

import math


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: binomial test of min(b, c) in b + c trials with p = 1/2.

    Computed directly (p = min(1, 2 * P[X <= min(b, c)])), which equals
    `scipy.stats.binomtest(b, b + c, 0.5).pvalue` for the symmetric p = 1/2 case. No discordant pairs: 1.0.
    """
    if b < 0 or c < 0:
        raise ValueError("counts must be non-negative")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)
