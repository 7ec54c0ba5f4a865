#!/usr/bin/env bash
# Issue 25's six-benchmark table: every fixed baseline at `large` (vanilla, cot, sc-cot, the esc / asc stopping
# anchors and the logprob gate, chain, tree, complete, random), the default template and any trained policies given in TRAINED, on
# MMLU, GSM8K, AQuA, MultiArith, SVAMP and HumanEval `test` (MMLU: its `val` evaluation split), the first LIMIT
# items x SEEDS seeds, the same items and seeds for every method, then `lemon report` with paired tests against
# the best baseline. Resumable: every `lemon eval` resumes from the store, so re-run it after an interruption.
#
# Order: cheapest methods first and one benchmark-method pair at a time, so a partial run is already a table;
# sc-cot with 5 voters fills the sample bank, after which cot / esc / asc of the same items cost no worker call
# (runtime.executor.sample_slot). On these 2 cores one `large` agent takes ~20 s per item: the whole table at
# 30 x 2 is days of CPU, so it runs in the background over several working periods (say how far it got). On
# a GPU machine the same command with LEMON_GPU_LAYERS=-1 (or a served pool: POOL=FILE) runs it at full size.
#
# Usage: LEMON_DATA_DIR=../shared/data [LIMIT=30 SEEDS=2 POOL=cpu BENCHES="..." TRAINED="runs/a/final ..."] \
#          [JOBS=2 THREADS=1 (on 2 cores)] \
#          bash experiments/six_benchmarks.sh [STORE]
set -euo pipefail
store="${1:-${LEMON_HOME:-$HOME/.cache/lemon}/six-benchmarks.sqlite}"
limit="${LIMIT:-30}"
seeds="${SEEDS:-2}"
pool="${POOL:-cpu}"
log="$store.runs.log"
source "$(dirname "$0")/common.sh"  # import_bank, lemon_jobs (JOBS, THREADS)
import_bank
read -r -a benches <<< "${BENCHES:-multiarith svamp gsm8k aqua mmlu humaneval}"


evaluate() {  # benchmark method [extra args]: one resumable evaluation, recorded in the log first
  local bench="$1" method="$2"
  shift 2
  local args=(eval "$bench" --method "$method" --limit "$limit" --seeds "$seeds" --pool "$pool"
              --store "$store" "$@")
  echo "$(date -u +%FT%TZ) commit=$(git rev-parse --short HEAD) lemon ${args[*]} jobs=$jobs threads=${THREADS:-all}" >> "$log"
  lemon_jobs "${args[@]}"
}

for bench in "${benches[@]}"; do
  evaluate "$bench" vanilla --level large
  evaluate "$bench" sc-cot --level large --agents 5
  for method in cot esc asc gate; do evaluate "$bench" "$method" --level large; done
done
for bench in "${benches[@]}"; do
  for method in chain tree complete random; do evaluate "$bench" "$method" --level large; done
  evaluate "$bench" template
  for policy in ${TRAINED:-}; do evaluate "$bench" "trained:$policy"; done
done
# Paired tests against the best fixed baseline of each benchmark (at any level for the orchestrators)
compare=(--compare "vanilla,best" --compare "template,best")
for policy in ${TRAINED:-}; do compare+=(--compare "trained:$policy,best"); done
lemon report --store "$store" "${compare[@]}"
