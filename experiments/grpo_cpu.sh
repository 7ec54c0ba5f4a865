#!/usr/bin/env bash
# The CPU training experiment of issue 4 (not yet run to completion; see docs/results.md):
#   SFT warm start -> GRPO + counterfactual credit and GRPO without it (same tasks, seeds, steps) on the
#   GSM8K TRAIN split with the `cpu` pool, then every orchestrator and the fixed baselines on the SAME held-out
#   MultiArith test items and seeds. Train and test are disjoint by construction (train vs test splits).
# Each step resumes: re-run the script after an interruption. Many hours on 2 CPU cores. On a GPU machine the
# policy moves to CUDA by itself; with a CUDA build of llama-cpp-python and LEMON_GPU_LAYERS=-1 the worker
# models run there too (the baselines table took ~15 min that way on one H100).
# Usage: LEMON_DATA_DIR=../shared/data bash experiments/grpo_cpu.sh [RUNS_DIR]
set -euo pipefail
runs="${1:-runs/grpo-cpu}"
store="$runs/eval.sqlite"
steps=60
mkdir -p "$runs"
[ -f "$runs/sft/sft.json" ] || lemon sft --out "$runs/sft" --benchmark gsm8k --teacher-pool cpu --teacher-level large
for variant in cf global; do
  flags=(); [ "$variant" = global ] && flags=(--no-cf)
  resume=(); [ -d "$runs/$variant/checkpoints" ] && resume=(--resume)
  lemon train --run-dir "$runs/$variant" --policy "$runs/sft/model" --benchmark gsm8k --pool cpu \
    --steps "$steps" --save-every 10 --seed 0 "${flags[@]}" "${resume[@]}"
  lemon plot "$runs/$variant" --out "docs/grpo-$variant.png"
done
eval_args=(--limit 50 --seeds 2 --pool cpu --level medium --store "$store")
for method in "trained:$runs/cf/final" "trained:$runs/global/final" "trained:$runs/sft/model" prompted \
              vanilla cot sc-cot tree; do
  lemon eval multiarith --method "$method" "${eval_args[@]}"
done
lemon report --store "$store" --out docs/results-grpo.md --plot docs/grpo-accuracy-vs-tokens.png \
  --compare "trained:$runs/cf/final" best
