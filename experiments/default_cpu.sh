#!/usr/bin/env bash
# Issue 11's measurement: the default orchestration (`template`) against ONE chain-of-thought agent at each
# level of the `cpu` pool, on the first 60 MultiArith `test` items and the first 20 AQuA `test` items, seeds 0
# and 1, workers sampled at 0.7 with --max-tokens 256, one item at a time (--concurrency 1) so that the
# per-item wall time is what one `lemon run` costs. About 3 h on 2 CPU cores; re-running resumes.
# The template's first voter makes the `cot` agent's exact request, so the LLM cache serves it here and its
# wall times are too low: the uncached comparison is `python benchmarks/bench_default.py` (D1).
# Usage: LEMON_DATA_DIR=../shared/data bash experiments/default_cpu.sh [STORE]
set -euo pipefail
store="${1:-${LEMON_HOME:-$HOME/.cache/lemon}/default-cpu.sqlite}"
common=(--seeds 2 --pool cpu --max-tokens 256 --concurrency 1 --store "$store")
for bench_limit in "multiarith 60" "aqua 20"; do
  read -r bench limit <<< "$bench_limit"
  for level in small medium large; do
    lemon eval "$bench" --method cot --level "$level" --limit "$limit" "${common[@]}"
  done
  lemon eval "$bench" --method template --limit "$limit" "${common[@]}"
done
lemon report --store "$store"
