"""Runtime speed targets P1-P3, measured side by side in one run with the scripted test double.

P1  wall time / critical-path time of a width-8 fan-out + 1 aggregator at 50 ms per call (target <= 1.15)
P2  runtime overhead per node with a zero-latency model, in ms (target < 1); the backend's own time for the
    same requests is measured in the same run and subtracted
P3  model calls of a counterfactual re-run / (edited agent + its descendants), per operator family on a
    6-agent spec (target exactly 1.00)

Run from the repository root: `PYTHONPATH=. python benchmarks/bench_runtime.py` (it runs the executor tests'
specs, tests/runtime/specs.py). One line per measure, starting with its id.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from lemon.errors import run_script
from lemon.llm.pool import Pool
from lemon.llm.scripted import ScriptedBackend
from lemon.runtime import Executor, NodeCache
from lemon.spec.edits import FAMILIES, applicable_edits, apply_edit
from lemon.spec.model import Agent, Spec
from lemon.spec.roles import RoleLibrary
from tests.pools import LEVELS, pool_of
from tests.runtime.specs import SIX, fan_out

ROLES = RoleLibrary.load()


def pool(latency_s: float) -> Pool:
    return pool_of({n: ScriptedBackend(f"m-{n}", latency_s=latency_s) for n in LEVELS}, concurrency=64, name="bench")


def chain(n: int, tag: int) -> Spec:
    return Spec(agents=tuple(Agent(name=f"a{i}", role="generalist", duty=f"Step {i} of run {tag}.",
                                   capacity=LEVELS[i % 3], depends_on=(f"a{i - 1}",) if i else ())
                             for i in range(n)), output=f"a{n - 1}")


async def p1(repeats: int, latency: float) -> float:
    ex = Executor(pool(latency), ROLES)
    walls = []
    for r in range(repeats):
        start = time.perf_counter()
        result = await ex.run(fan_out(8, f" run {r}"), "task")
        walls.append(time.perf_counter() - start)
        assert result.status == "ok" and result.calls == 9
    return statistics.median(walls) / (2 * latency)


async def p2(repeats: int, n: int = 12) -> float:
    p = pool(0.0)
    ex = Executor(p, ROLES)
    specs = [chain(n, r) for r in range(repeats)]
    start = time.perf_counter()
    for s in specs:
        await ex.run(s, "task")
    total = time.perf_counter() - start
    # The backend's own cost for exactly the same requests, replayed directly.
    requests = [(lv.backend, req) for lv in p.levels for req in lv.backend.calls]  # type: ignore[attr-defined]
    start = time.perf_counter()
    for backend, req in requests:
        await backend.complete(req)
    backend_time = time.perf_counter() - start
    return 1000 * (total - backend_time) / (repeats * n)


async def p3() -> dict[str, float]:
    ratios: dict[str, list[float]] = {f: [] for f in FAMILIES}
    for family in FAMILIES:
        for ref in applicable_edits(SIX, family, LEVELS):
            ex = Executor(pool(0.0), ROLES, node_cache=NodeCache())
            await ex.run(SIX, "task")
            result = await ex.run(apply_edit(SIX, ref, LEVELS).spec, "task")
            ratios[family].append(result.calls / (1 + len(SIX.descendants(ref.agent))))
    return {f: statistics.mean(v) for f, v in ratios.items()}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    r1 = await p1(args.repeats, 0.05)
    r2 = await p2(args.repeats * 10)
    r3 = await p3()
    print(f"P1 {r1:.3f}  wall/critical-path, width-8 fan-out + aggregator at 50 ms, target <= 1.15")
    print(f"P2 {r2:.3f}  ms runtime overhead per node (zero-latency model), target < 1")
    for family, ratio in r3.items():
        print(f"P3 {ratio:.2f}  calls of counterfactual re-run / (edited + descendants), {family}, target 1.00")


if __name__ == "__main__":
    run_script(lambda: asyncio.run(main()))
