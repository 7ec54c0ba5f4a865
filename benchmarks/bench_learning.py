"""Does localized counterfactual credit make GRPO learn faster? Measured in a SIMULATED environment.

SIMULATED, NOT A LEMON RESULT. The real trainer (`lemon.train.grpo.Trainer`: rollout phases, counterfactual
planning and re-runs through the node cache, credit, loss, Adam) runs on two named test doubles from
`lemon.train.simulate`: workers whose chance of answering right is calibrated per capacity level (`medium`
from the cpu pool's measured CoT accuracy on MultiArith; `small` and `large` are assumptions, printed below)
and raised by a right parent note; and a factorised policy over the fields of a two-agent team (duties,
capacities, the checker's edge, the output agent). Because the environment is known, the policy's EXPECTED
success is computed exactly after every step, so "steps to threshold" carries no evaluation noise.

For each seed, global-only GRPO and GRPO + counterfactual credit start from the same uniform policy, see the
same tasks and worker draws, and train until the expected success reaches the threshold (or `--max-steps`,
in which case the run counts as max-steps and is reported as censored).

Prints (the +CF variant is the default config: families edge, role, level; cf_budget 0.2):
    L1 <ratio>  steps-to-threshold global / +CF (mean over seeds), >1 means CF learns faster
    L1-global <mean> +- <std>  steps (censored runs: k)
    L1-cf <mean> +- <std>  steps (censored runs: k)
    L1-lower <ratio>  the same with the paper's capacity operator (lower one level) instead of `level`
    L1-uncapped <ratio>  the default families with every valid spec edited (cf_budget null)
    L1-discount <ratio>  the family sampler scoring |Δ| x (1 - the group's agreement on the edited field)
    L1-pairwise <ratio>  credit as a preference between the written and the edited value (credit.cf_form)
Run: `python benchmarks/bench_learning.py [--seeds 5] [--max-steps 150] [--threshold 0.72]` (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time

from lemon.errors import run_script
from lemon.train.simulate import CALIBRATED_SUCCESS, best_success, expected_success, simulated_trainer

log = logging.getLogger("bench_learning")


VARIANTS: dict[str, dict[str, object]] = {
    "cf": {},
    "lower": {"families": ("edge", "role", "capacity")},
    "uncapped": {"cf_budget": None},
    "discount": {"confidence_discount": True},
    "pairwise": {"cf_form": "pairwise"},
}


async def steps_to_threshold(seed: int, cf: bool, threshold: float, max_steps: int, lr: float,
                             **overrides: object) -> int | None:
    """The first step after which the policy's expected success is >= threshold; None if never."""
    trainer = simulated_trainer(seed=seed, cf=cf, lr=lr, **overrides)  # type: ignore[arg-type]
    for step in range(1, max_steps + 1):
        await trainer.step(step)
        if expected_success(trainer.policy) >= threshold:
            return step
    return None


def _summary(name: str, steps: list[int | None], max_steps: int) -> tuple[float, str]:
    filled = [s if s is not None else max_steps for s in steps]
    censored = sum(1 for s in steps if s is None)
    mean = statistics.fmean(filled)
    std = statistics.stdev(filled) if len(filled) > 1 else 0.0
    return mean, f"{name} {mean:.1f} +- {std:.1f}  steps per seed {filled} (censored runs: {censored})"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--max-steps", type=int, default=150)
    ap.add_argument("--threshold", type=float, default=0.72)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"simulated environment (NOT a LEMON result): single-agent success per level {CALIBRATED_SUCCESS} "
          f"(medium measured; small, large assumed); best team {best_success():.3f}; threshold {args.threshold}")
    t0 = time.perf_counter()

    async def run(seed: int, cf: bool, **overrides: object) -> int | None:
        return await steps_to_threshold(seed, cf, args.threshold, args.max_steps, args.lr, **overrides)

    base = [await run(seed, False) for seed in range(args.seeds)]
    g_mean, g_line = _summary("L1-global", base, args.max_steps)
    lines = [g_line]
    for name, overrides in VARIANTS.items():
        steps = [await run(seed, True, **overrides) for seed in range(args.seeds)]
        mean, line = _summary(f"L1-{name}", steps, args.max_steps)
        lines.append(line)
        label = "L1" if name == "cf" else f"L1-{name}"
        print(f"{label} {g_mean / mean:.2f}  steps-to-threshold global / +CF ({name}), mean over {args.seeds} "
              "seeds, >1 means CF learns faster")
    for line in lines:
        print(line)
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    run_script(lambda: asyncio.run(main()))
