"""What a GRPO run's policy wrote, step window by step window: mean success, the share of sampled specs whose
every model-calling agent is on the strongest level, and the share of single-agent specs.

The reward curve says whether the policy improved; these say HOW (on the `cpu` pool the level of the solver is
worth ~50 points of MultiArith accuracy, docs/results.md). Reads RUN/samples.jsonl (every sampled spec).
Usage: python experiments/learning_summary.py RUN_DIR [RUN_DIR ...] [--window 5] [--strongest large]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lemon.errors import run_script
from lemon.spec.parse import parse_spec
from lemon.spec.roles import RoleLibrary


def spec_shape(text: str, roles: RoleLibrary, strongest: str) -> tuple[bool, bool]:
    """(every model-calling agent on `strongest`, exactly one model-calling agent)."""
    spec = parse_spec(text)
    llm = [a for a in spec.agents if roles[a.role].kind == "llm"]
    return all(a.capacity == strongest for a in llm), len(llm) == 1


def summarize(run: Path, window: int, strongest: str) -> list[str]:
    roles = RoleLibrary.load()
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    last = max(r["step"] for r in rows)
    lines = [f"{run}: {len(rows)} sampled specs over {last} steps"]
    for lo in range(1, last + 1, window):
        chunk = [r for r in rows if lo <= r["step"] < lo + window]
        valid = [r for r in chunk if r["valid"]]
        shapes = [spec_shape(r["completion"], roles, strongest) for r in valid]
        n = max(1, len(valid))
        lines.append(f"  steps {lo:>3}-{min(lo + window - 1, last):<3} valid {len(valid)}/{len(chunk)}  "
                     f"success {sum(r['success'] for r in valid) / n:.2f}  "
                     f"all-{strongest} {sum(s[0] for s in shapes) / n:.2f}  "
                     f"one-agent {sum(s[1] for s in shapes) / n:.2f}  "
                     f"worker tokens {sum(r['tokens'] for r in valid) / n:.0f}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--strongest", default="large")
    args = ap.parse_args()
    for run in args.runs:
        print("\n".join(summarize(run, args.window, args.strongest)))


if __name__ == "__main__":
    run_script(main)
