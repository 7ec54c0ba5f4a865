#!/usr/bin/env bash
# Issue 24's measurements on the 2-core CPU, in resumable stages (each `lemon eval` resumes from the store;
# re-run the script after an interruption and finished items are skipped).
#
# The sample bank: an agent's sampling seed derives from its role and rank (runtime.executor.sample_slot),
# so the k-th CoT voter of an item draws the same sample in every team. Stage `bank` runs the 5-voter
# sc-cot at `large` once per (item, seed); every team made of those voters (cot = voter 1, sc-cot 3, the
# esc / asc stopping anchors, the logprob gate (its scores computed once and cached), a trained policy's vote teams) is then answered from the LLM request cache,
# at no worker call. One voter at `large` takes ~20 s here, so a benchmark's 60 items x 2 seeds is ~7 h:
# the bank is built over several working periods.
#
# Usage: LEMON_DATA_DIR=../shared/data bash experiments/adaptive_cpu.sh [STAGE ...]
#   stages (default: bank singles anchors, in this order): bank singles anchors train-bank programs
#   train-program-bank program-bank
#   train-bank: the same 5 voters on the TRAIN splits of the training mixture (TRAIN_BENCHES), one seed, grown in
#   steps of 10 items per benchmark up to TRAIN_LIMIT, so a partial bank is balanced across the mixture. The
#   trainer's `workers.seeds: bank` draws exactly these samples (seed 0 of `lemon eval` on the train split).
#   programs: pot-esc (program voters that stop once 2 agree) on the test items, seed 0 first; then program-bank:
#   all 5 program voters (sc-pot) on the test items and, in steps of 10, on the TRAIN items of the mixture, so
#   every program or mixed team is a bank hit as the prose teams are. A program voter takes ~10 s here.
#   train-program-bank: the TRAIN part of program-bank alone (what the program-menu SFT teacher and GRPO replay).
# Environment: STORE (default $LEMON_HOME/adaptive-cpu.sqlite), LIMIT (60), SEEDS (2), BENCHES ("svamp gsm8k"),
# POOL (cpu), TRAIN_BENCHES ("gsm8k svamp multiarith"), TRAIN_LIMIT (40), JOBS (1) and THREADS (see below;
# JOBS=2 THREADS=1 on 2 cores).
set -euo pipefail
home="${LEMON_HOME:-$HOME/.cache/lemon}"
store="${STORE:-$home/adaptive-cpu.sqlite}"
limit="${LIMIT:-60}"
seeds="${SEEDS:-2}"
benches="${BENCHES:-svamp gsm8k}"
pool="${POOL:-cpu}"
train_benches="${TRAIN_BENCHES:-gsm8k svamp multiarith}"
train_limit="${TRAIN_LIMIT:-40}"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(bank singles anchors)
mkdir -p "$home"
log="$store.runs.log"
source "$(dirname "$0")/common.sh"  # import_bank, logged_eval (JOBS, THREADS)
import_bank

evaluate() {  # benchmark method [extra eval args]: one resumable evaluation, recorded in the log first
  local bench="$1" method="$2"
  shift 2
  local args=(eval "$bench" --method "$method" --split "${SPLIT:-test}" --limit "${N_ITEMS:-$limit}" --pool "$pool"
              --level large --store "$store" "$@")
  logged_eval "$log" "${args[@]}"
}

bank_train() {  # METHOD: its 5 voters on the TRAIN items of the mixture, one seed, in steps of 10 items up to
  # TRAIN_LIMIT (and TRAIN_LIMIT itself), so a partial bank stays balanced across the mixture
  local n bench
  for n in $({ seq 10 10 "$train_limit"; echo "$train_limit"; } | sort -nu); do
    for bench in $train_benches; do SPLIT=train N_ITEMS="$n" evaluate "$bench" "$1" --agents 5 --seeds 1; done
  done
}

for stage in "${stages[@]}"; do
  case "$stage" in
    bank)  # seed 0 of every benchmark first, so a partial bank is already a paired comparison
      for s in $(seq 1 "$seeds"); do
        for bench in $benches; do evaluate "$bench" sc-cot --agents 5 --seeds "$s"; done
      done ;;
    singles)
      for bench in $benches; do evaluate "$bench" vanilla --seeds "$seeds"; done ;;
    anchors)  # answered from the bank: no worker call once `bank` is complete
      for bench in $benches; do
        evaluate "$bench" cot --seeds "$seeds"
        evaluate "$bench" sc-cot --agents 3 --seeds "$seeds"
        evaluate "$bench" esc --agents 5 --seeds "$seeds"
        evaluate "$bench" asc --agents 5 --seeds "$seeds"
        evaluate "$bench" gate --agents 5 --seeds "$seeds"  # scores each voter it runs once (cached), no worker call
      done ;;
    train-bank) bank_train sc-cot ;;
    programs)
      for s in $(seq 1 "$seeds"); do
        for bench in $benches; do evaluate "$bench" pot-esc --seeds "$s"; done
      done ;;
    train-program-bank) bank_train sc-pot ;;
    program-bank)
      bank_train sc-pot
      for s in $(seq 1 "$seeds"); do
        for bench in $benches; do evaluate "$bench" sc-pot --agents 5 --seeds "$s"; done
      done ;;
    *) echo "unknown stage $stage (bank, singles, anchors, train-bank, programs, train-program-bank," \
            "program-bank)" >&2; exit 2 ;;
  esac
done
