"""Adaptive choice of which edit family to use for the next counterfactual.

A family whose edits recently changed the reward a lot (large |Δ|) is where credit is informative, so it
is sampled more; a floor keeps every family alive, because |Δ| moves as the policy changes and a family
that looked useless must still be re-measured. Windowed mean rather than EMA: its state is the recent
values themselves, easy to inspect and to check.

With `discount` on, a contrast counts as |Δ| x room, room = 1 - the share of its group that chose the same
value for the edited field. A field the whole group agrees on is a settled choice: its Δ, however large,
confirms what the policy already does (measured in issue 10's CPU run: `level` kept |Δ| ~ 0.24 after every
sample was `large`, and drew 18 of 29 edits away from the duty edits that still separated two teams).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from lemon.errors import ConfigError
from lemon.train.config import DEFAULT_FAMILIES, SamplerConfig


def _mean(values: Iterable[float]) -> float:
    """Mean of non-negative values that stays finite even near the float maximum (scaled by the largest)."""
    xs = list(values)
    top = max(xs)
    if top <= 0.0:
        return 0.0
    return top * (math.fsum(x / top for x in xs) / len(xs))  # the factor is <= 1: cannot overflow


class AdaptiveFamilySampler:
    """p(f) = floor + (1 - k * floor) * s_f / sum(s), s_f = mean |Δ| over f's last `window` contrasts.

    A family with no data yet scores the mean of the families that have data (uniform when none has);
    when every score is zero the mix is uniform. Every probability is >= floor by construction.
    """

    def __init__(self, families: Iterable[str] = DEFAULT_FAMILIES, floor: float = 0.1, window: int = 64,
                 seed: int = 0, discount: bool = False) -> None:
        self.families: tuple[str, ...] = tuple(families)
        if not self.families or len(set(self.families)) != len(self.families):
            raise ConfigError(f"sampler families must be non-empty and unique, got {list(self.families)}")
        if not (math.isfinite(floor) and floor >= 0.0) or floor * len(self.families) > 1.0:
            raise ConfigError(f"sampler floor {floor} must be >= 0 with floor x {len(self.families)} "
                              "families <= 1")
        if window < 1:
            raise ConfigError(f"sampler window must be >= 1, got {window}")
        self.floor = float(floor)
        self.window = int(window)
        self.discount = bool(discount)
        self._history: dict[str, deque[float]] = {f: deque(maxlen=self.window) for f in self.families}
        self._rng = random.Random(seed)

    @classmethod
    def from_config(cls, cfg: SamplerConfig, seed: int = 0) -> AdaptiveFamilySampler:
        """A sampler with the settings of the ``sampler`` section of a training config."""
        return cls(cfg.families, floor=cfg.floor, window=cfg.window, seed=seed,
                   discount=cfg.confidence_discount)

    def update(self, family: str, delta: float, room: float = 1.0) -> None:
        """Record the reward contrast Δ of one counterfactual of `family` (only |Δ| matters), scaled by
        `room` in [0, 1] (1 - its group's agreement on the edited field) when the sampler discounts."""
        self._check_family(family)
        if not math.isfinite(delta):
            raise ValueError(f"non-finite delta {delta} for family {family}")
        if not 0.0 <= room <= 1.0:
            raise ValueError(f"room {room} for family {family} must be in [0, 1]")
        self._history[family].append(abs(float(delta)) * (room if self.discount else 1.0))

    def _scores(self) -> dict[str, float]:
        known = {f: _mean(h) for f, h in self._history.items() if h}
        if not known:
            return dict.fromkeys(self.families, 1.0)
        fill = _mean(list(known.values()))
        return {f: known.get(f, fill) for f in self.families}

    def probabilities(self) -> dict[str, float]:
        """Current sampling distribution over all families (sums to 1, each >= floor)."""
        k = len(self.families)
        scores = self._scores()
        top = max(scores.values())
        if top <= 0.0:
            return dict.fromkeys(self.families, 1.0 / k)
        scaled = {f: s / top for f, s in scores.items()}  # in [0, 1], so the sum cannot overflow
        total = math.fsum(scaled.values())
        free = 1.0 - k * self.floor
        return {f: self.floor + free * scaled[f] / total for f in self.families}

    def sample(self, available: Iterable[str]) -> str:
        """Draw a family among `available` (those with an applicable field in this spec)."""
        avail = set(available)
        for f in avail:
            self._check_family(f)
        if not avail:
            raise ValueError("no edit family is applicable to this spec")
        probs = self.probabilities()
        # Spec order, not set order: the draw must be reproducible from the seed.
        cands = [f for f in self.families if f in avail]
        return self._rng.choices(cands, weights=[probs[f] for f in cands], k=1)[0]

    def reseed(self, seed: int) -> None:
        """Restart the draw stream (a data-parallel process draws from its own per-step stream)."""
        self._rng = random.Random(seed)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state for --resume (settings, recent |Δ| per family, RNG state)."""
        version, internal, gauss = self._rng.getstate()
        return {
            "families": list(self.families), "floor": self.floor, "window": self.window, "discount": self.discount,
            "history": {f: list(h) for f, h in self._history.items()},
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a `state_dict`; the families must match (a different set is a different experiment)."""
        if list(state["families"]) != list(self.families):
            raise ConfigError(f"sampler state has families {list(state['families'])}, "
                              f"this run uses {list(self.families)}")
        self.floor = float(state["floor"])
        self.window = int(state["window"])
        self.discount = bool(state.get("discount", False))  # runs saved before the option never discounted
        self._history = {f: deque((float(x) for x in state["history"][f]), maxlen=self.window)
                         for f in self.families}
        version, internal, gauss = state["rng"]
        self._rng.setstate((int(version), tuple(int(x) for x in internal), gauss))

    def _check_family(self, family: str) -> None:
        if family not in self._history:
            raise ValueError(f"unknown edit family {family!r}; known: {list(self.families)}")
