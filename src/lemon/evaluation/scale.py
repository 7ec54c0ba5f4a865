"""Scale an evaluation out with Ray: each (item, seed) is a Ray actor call to the SAME `run_item` function.

Pools hold live model handles and connections and are not picklable, so they never travel: each Ray worker is
an `EvalWorker` actor that builds its own `ItemContext` (pool, executor, orchestrator) once, from the
picklable `EvalSettings` and pool factory, and keeps it for every item it runs. That is the "one pool per
worker process" without any module-level mutable state. The driver keeps at most `concurrency` calls in flight
(spread over the actors, fewest-busy first), waits with `ray.wait`, and writes each result to the results
store the moment it arrives, so a killed driver loses only the calls in flight; re-running resumes.

`--ray local` starts a private local Ray instance (shut down at the end); `--ray auto` connects to a running
cluster if there is one, else starts a local one; any other value is passed to `ray.init(address=...)`
(e.g. `ray://head:10001`). On a remote cluster, LEMON and the pool's models must be installed on every node.

This module stands on `item.py` only; the local driver (`evaluate.py`) calls `run_with_ray`, never the other way.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from lemon.benchmarks.base import Item
from lemon.errors import ConfigError, LemonError
from lemon.evaluation.item import EvalSettings, ItemContext, PoolFactory, build_context, run_item
from lemon.evaluation.store import ItemRow

log = logging.getLogger(__name__)


class EvalWorker:
    """A Ray actor body: holds one ItemContext (built lazily on the actor's event loop) and runs items."""

    def __init__(self, settings: EvalSettings, pool_factory: PoolFactory | None = None) -> None:
        self._settings = settings
        self._pool_factory = pool_factory
        self._ctx: ItemContext | None = None

    async def run(self, item: Item, seed: int) -> ItemRow:
        if self._ctx is None:  # no await between the test and the assignment: safe under concurrency
            self._ctx = build_context(self._settings, self._pool_factory)
        return await run_item(self._ctx, item, seed)

    async def close(self) -> None:
        if self._ctx is not None:
            await self._ctx.aclose()
            self._ctx = None


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'lemon-mas[ray]' (or 'ray[default]')") from None
    return ray


def init_ray(address: str) -> bool:
    """Connect to / start Ray for `address`; returns True when this call started it (and must stop it)."""
    ray = _import_ray()
    if ray.is_initialized():
        return False
    common: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if address == "local":
        ray.init(include_dashboard=False, **common)
        return True
    if address == "auto":
        try:
            ray.init(address="auto", **common)
        except (ConnectionError, RuntimeError):
            log.info("no running Ray cluster found; starting a local one")
            ray.init(include_dashboard=False, **common)
        return True
    try:
        ray.init(address=address, **common)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"cannot connect to Ray at {address!r}: {exc}; use --ray local instead") from exc
    return True


async def run_with_ray(
    address: str,
    settings: EvalSettings,
    jobs: Sequence[tuple[Item, int]],
    record: Callable[[ItemRow], None],
    *,
    concurrency: int,
    pool_factory: PoolFactory | None = None,
    num_workers: int | None = None,
) -> None:
    """Run (item, seed) `jobs` on Ray actors; `record(row)` runs on the driver as each one finishes."""
    if not jobs:
        return
    ray = _import_ray()
    started = init_ray(address)
    actors: list[Any] = []
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        n_workers = num_workers or max(1, min(concurrency, cpus, len(jobs)))
        per_worker = max(1, math.ceil(concurrency / n_workers))
        # One CPU per actor unless more actors than CPUs were asked for (then they share).
        actor_cls = ray.remote(num_cpus=min(1.0, cpus / n_workers))(EvalWorker)
        actors = [actor_cls.options(max_concurrency=per_worker).remote(settings, pool_factory)
                  for _ in range(n_workers)]
        busy = [0] * n_workers
        in_flight: dict[Any, int] = {}
        queue = list(jobs)[::-1]

        def submit() -> None:
            k = min(range(n_workers), key=busy.__getitem__)
            item, seed = queue.pop()
            in_flight[actors[k].run.remote(item, seed)] = k
            busy[k] += 1

        while queue and len(in_flight) < concurrency:
            submit()
        while in_flight:
            done, _ = await asyncio.to_thread(ray.wait, list(in_flight), num_returns=1)
            for ref in done:
                busy[in_flight.pop(ref)] -= 1
                record(_get(ray, ref))
                if queue:
                    submit()
    finally:
        for actor in actors:
            try:
                ray.get(actor.close.remote(), timeout=10)
            except Exception:  # a dead actor has nothing left to close
                log.debug("closing a Ray worker failed", exc_info=True)
            ray.kill(actor)
        if started:
            ray.shutdown()


def _get(ray: Any, ref: Any) -> ItemRow:
    """The result of a finished call; a LemonError raised in a worker comes back as itself (one line)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, LemonError):
            raise cause from None
        raise
