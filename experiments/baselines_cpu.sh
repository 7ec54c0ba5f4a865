#!/usr/bin/env bash
# The first results table (docs/results.md): every fixed-topology baseline on the same first 30 items of the
# MultiArith and GSM8K evaluation splits, every agent at the `medium` level of the `cpu` pool
# (Qwen2.5-Coder-0.5B-Instruct), workers sampled at temperature 0.7 with seeds 0 and 1.
# Hours on 2 cores. Safe to interrupt: re-running resumes from the results store.
# Usage: LEMON_DATA_DIR=../shared/data bash experiments/baselines_cpu.sh [STORE]
set -euo pipefail
store="${1:-${LEMON_HOME:-$HOME/.cache/lemon}/baselines-cpu.sqlite}"
for bench in multiarith gsm8k; do
  for method in vanilla cot chain tree complete random sc-cot; do
    lemon eval "$bench" --method "$method" --limit 30 --seeds 2 --pool cpu --level medium \
      --max-tokens 256 --concurrency 2 --store "$store"
  done
done
lemon report --store "$store" --out docs/results.md --plot docs/baselines-accuracy-vs-tokens.png \
  --compare vanilla best
