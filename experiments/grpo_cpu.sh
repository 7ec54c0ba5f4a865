#!/usr/bin/env bash
# The CPU training experiment of issue 4 (results and caveats: docs/results.md, "GRPO on the CPU"):
#   SFT warm start -> GRPO + counterfactual credit and GRPO without it (same tasks, seeds, steps) on the
#   GSM8K TRAIN split with the `cpu` pool, then every orchestrator and the fixed baselines on the SAME held-out
#   MultiArith test items and seeds. Train and test are disjoint by construction (train vs test splits).
# Each stage resumes: re-run the script after an interruption (the LLM cache keeps every worker call).
# Sizes come from the environment; the defaults are the full experiment (many hours on 2 CPU cores). The run
# reported in docs/results.md used STEPS=20 LIMIT=20 and the SFT run of TEACHER_LEVEL=medium N_TRAIN=160
# EPOCHS=2 (the second SFT run there).
# On a GPU machine the policy moves to CUDA by itself; with a CUDA build of llama-cpp-python and
# LEMON_GPU_LAYERS=-1 the worker models run there too.
# Usage: LEMON_DATA_DIR=../shared/data [STEPS=60] [LIMIT=50] bash experiments/grpo_cpu.sh [RUNS_DIR]
set -euo pipefail
runs="${1:-runs/grpo-cpu}"
steps="${STEPS:-60}"
limit="${LIMIT:-50}"
seeds="${SEEDS:-2}"
store="$runs/eval.sqlite"
mkdir -p "$runs"
[ -f "$runs/sft/sft.json" ] || lemon sft --out "$runs/sft" --benchmark gsm8k --teacher-pool cpu \
  --teacher-level "${TEACHER_LEVEL:-large}" --limit "${N_TRAIN:-200}" --epochs "${EPOCHS:-3}"
for variant in cf global; do
  flags=(); [ "$variant" = global ] && flags=(--no-cf)
  resume=(); [ -d "$runs/$variant/checkpoints" ] && resume=(--resume)
  [ -d "$runs/$variant/final" ] || lemon train --out "$runs/$variant" --policy "$runs/sft/model" \
    --benchmark gsm8k --pool cpu --steps "$steps" --save-every 5 --seed 0 "${flags[@]}" "${resume[@]}"
done
lemon plot "$runs/cf" "$runs/global" --smooth 5 --file docs/grpo-training.png
cf="trained:$runs/cf/final"; global="trained:$runs/global/final"; sft="trained:$runs/sft/model"
eval_args=(--limit "$limit" --seeds "$seeds" --pool cpu --store "$store")
for method in "$cf" "$global" "$sft" prompted; do  # orchestrators choose each agent's level
  lemon eval multiarith --method "$method" "${eval_args[@]}"
done
for method in cot sc-cot vanilla; do
  lemon eval multiarith --method "$method" "${eval_args[@]}" --level medium
done
lemon report --store "$store" --file docs/results-grpo.md --plot docs/grpo-accuracy-vs-tokens.png \
  --compare "$cf,$global" --compare "$cf,$sft" --compare "$cf,prompted" --compare "$cf,best" \
  --compare "$cf,vanilla" --compare "$sft,prompted"
