"""How much room counterfactual credit had in a finished GRPO run: for every counterfactual the run made, the
probability that each given policy writes the credited span, given the task's prompt and the completion
before the span.

The credit on a token is A * (onehot - p) in logit space, so a span the policy writes with p ~ 1 cannot
move whatever its Δ. Runs trained before `cf_span_p` was logged (grpo.py) can be measured after the fact
from their samples and checkpoints (issue 10, docs/results.md).
Usage: LEMON_DATA_DIR=../shared/data python experiments/cf_span_probs.py RUN_DIR POLICY_DIR [POLICY_DIR ...]
           [--benchmark multiarith]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
from pathlib import Path

import torch

from lemon.errors import run_script
from lemon.llm.pools import pool_level_names
from lemon.orchestrator.policy_prompt import policy_messages
from lemon.spec.render import Span
from lemon.spec.roles import RoleLibrary
from lemon.train.generation import chat_prompt_ids, score_completions
from lemon.train.policy import load_policy
from lemon.train.tasks import load_train_tasks
from lemon.train.token_spans import char_span_to_token_indices, completion_offsets

log = logging.getLogger("cf_span_probs")


def credited(run: Path) -> list[dict]:
    """The samples of RUN that got a counterfactual, with their step, task, completion, span and Δ."""
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r for r in rows if r.get("cf")]


@torch.no_grad()
def span_probs(policy_dir: str, rows: list[dict], prompts: dict[str, str], levels: list[str]) -> list[float]:
    """Per row: exp(mean log p) of the span's tokens under `policy_dir` at temperature 1."""
    model, tok = load_policy(policy_dir, device="cpu")
    model.eval()
    roles = RoleLibrary.load()
    out = []
    for r in rows:
        prompt = chat_prompt_ids(tok, policy_messages(prompts[r["task_id"]], roles, levels))
        ids, offsets = completion_offsets(tok, r["completion"])
        idx = char_span_to_token_indices(offsets, Span(*r["cf"]["span"]))
        lp, _, _ = score_completions(model, [prompt], [ids], tok.pad_token_id)
        out.append(math.exp(float(lp[0, idx].mean())) if idx else math.nan)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("policies", nargs="+")
    ap.add_argument("--benchmark", default="multiarith")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = credited(args.run)
    _, tasks = load_train_tasks(args.benchmark)
    prompts = {t.id: t.prompt for t in tasks}
    levels = list(pool_level_names("cpu"))
    print(f"{args.run}: {len(rows)} counterfactuals; p = exp(mean log p) of the credited span's tokens")
    table = {p: span_probs(p, rows, prompts, levels) for p in args.policies}
    for k, r in enumerate(rows):
        cells = "  ".join(f"{table[p][k]:.4f}" for p in args.policies)
        print(f"step {r['step']:>2} {r['cf']['family']:<5} {r['cf']['field']['kind']:<8} "
              f"delta {r['cf']['delta']:+.3f}  p {cells}")
    for p in args.policies:
        ps = [x for x in table[p] if not math.isnan(x)]
        print(f"{p}: median p {statistics.median(ps):.4f}, p > 0.99 for {sum(x > 0.99 for x in ps)}/{len(ps)}")


if __name__ == "__main__":
    run_script(main)
