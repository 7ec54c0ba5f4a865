#!/usr/bin/env bash
# The first results table (docs/results.md): every fixed-topology baseline on the same first 30 items of the
# MultiArith and GSM8K evaluation splits, every agent at the `medium` level of the `cpu` pool
# (Qwen2.5-Coder-0.5B-Instruct), workers sampled at temperature 0.7 with seeds 0 and 1.
# About 7 h on 2 CPU cores. Safe to interrupt: re-running resumes from the results store.
# On a GPU (llama-cpp-python built with CUDA): LEMON_GPU_LAYERS=-1 JOBS=4 runs every (benchmark, method) at once,
# each as JOBS shard processes writing the same store (about 15 min on one H100).
# Usage: LEMON_DATA_DIR=../shared/data [LEMON_GPU_LAYERS=-1 JOBS=4] bash experiments/baselines_cpu.sh [STORE]
set -euo pipefail
store="${1:-${LEMON_HOME:-$HOME/.cache/lemon}/baselines-cpu.sqlite}"
jobs="${JOBS:-1}"
for bench in multiarith gsm8k; do
  for method in vanilla cot chain tree complete random sc-cot; do
    args=(eval "$bench" --method "$method" --limit 30 --seeds 2 --pool cpu --level medium --max-tokens 256
          --concurrency 2 --store "$store")
    if [ "$jobs" = 1 ]; then
      lemon "${args[@]}"
    else
      for ((i = 0; i < jobs; i++)); do lemon "${args[@]}" --shard "$i/$jobs" > /dev/null & done
    fi
  done
done
wait
lemon report --store "$store" --file docs/results.md --plot docs/baselines-accuracy-vs-tokens.png \
  --compare vanilla,best
