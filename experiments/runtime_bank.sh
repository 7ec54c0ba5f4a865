#!/usr/bin/env bash
# The banks of the issue "Learn the decisions that pay on this pool": the 5 prose (sc-cot) and 5 program (sc-pot)
# voters of every item a run-time decision (stop, escalate, verify) is learned on and judged on, at `large`.
# Each voter's draw is fixed by (item, seed, role, rank) (runtime.executor.sample_slot), so once an item's ten
# voters are banked every stop rule, verifier and learned controller over them replays at no worker call, and
# each reply's log-probability is banked with it (read from the generation: llm/embedded.py SampledLogprobs).
#
# Stages, each resumable (`lemon eval` resumes from the store; re-run after an interruption):
#   train  TRAIN items the controller learns from: GSM8K and SVAMP `train` items 1..TRAIN_LIMIT (60) x seed 0,
#          prose and program voters; MultiArith `train` the same; AQuA and MMLU `dev` (their training pool)
#          items 1..CHOICE_TRAIN_LIMIT (30) x seed 0, prose voters. Grown in three rounds (numbers to 20, 40, 60
#          items, choices to 10, 20, 30 after each), so a partial bank has every kind and is balanced.
#   test   TEST items that judge it (never used to choose a design): GSM8K and SVAMP `test` items 1..150 x seeds
#          0-1, prose and program voters; AQuA and MMLU (MMLU: its `val` evaluation split) items 1..60 x 2, prose.
#          Grown seed 0 first, in steps of 30 items, so a partial bank is already a paired comparison. With the
#          first step, MultiArith `test` items 1..30 x 2 too (prose and program): the six-benchmark table's number
#          cells of the default, whose number team is the learned rule over prose and program voters.
#   score  every prose reply of the stages' items that was banked before replies carried their log-probability
#          (the six-benchmark table's and choice_team.sh's draws) scored once, teacher-forced, and the score
#          banked (experiments/learn_stop_rule.py --score): the learned rule, the gate and cges read it.
# Default: train, test, score. One `large` prose voter takes ~20 s per item on 2 cores (a program voter ~10 s; AQuA
# and MMLU replies run to 1,024 tokens): the whole of both stages is tens of hours here, built over several
# working periods. Export the bank at the end of each (`lemon cache export experiments/bank/cpu.jsonl.gz`).
#
# A lent GPU draws the test stage in minutes: `PLAN=table BANK_STAGES=test bash experiments/gpu.sh` (its table plan,
# this script in place of the table's cells; the draws come back as a bank to import here).
# Usage: LEMON_DATA_DIR=../shared/data [JOBS=2 THREADS=1] [STORE=...] [POOL=cpu] [TRAIN_LIMIT=60]
#        [CHOICE_TRAIN_LIMIT=30] [TEST_LIMIT=150 CHOICE_TEST_LIMIT=60 TEST_SEEDS=2 MAX_TOKENS=]
#        bash experiments/runtime_bank.sh [train] [test] [score]
set -euo pipefail
{  # read whole before it runs: an edit to this file cannot reach a run in progress
home="${LEMON_HOME:-$HOME/.cache/lemon}"
store="${STORE:-$home/runtime-bank.sqlite}"
pool="${POOL:-cpu}"
train_limit="${TRAIN_LIMIT:-60}"
choice_train_limit="${CHOICE_TRAIN_LIMIT:-30}"
test_limit="${TEST_LIMIT:-150}"               # the test stage's sizes (issue 54's); smaller only to rehearse it
choice_test_limit="${CHOICE_TEST_LIMIT:-60}"
test_seeds="${TEST_SEEDS:-2}"
max_tokens=()  # MAX_TOKENS: another reply limit than each benchmark's own (a rehearsal's; the banks use none)
if [ -n "${MAX_TOKENS:-}" ]; then max_tokens=(--max-tokens "$MAX_TOKENS"); fi
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(train test score)
mkdir -p "$home"
log="$store.runs.log"
source "$(dirname "$0")/common.sh"  # import_bank, logged_eval (JOBS, THREADS)
import_bank

voters() {  # benchmark split items seeds method: the method's 5 voters on the first `items` items
  logged_eval "$log" eval "$1" --method "$5" --agents 5 --split "$2" --limit "$3" --seeds "$4" --pool "$pool" \
    --level large --store "$store" "${max_tokens[@]}"
}

steps() {  # LIMIT STEP: STEP, 2 STEP, ... up to LIMIT, and LIMIT itself
  { seq "$2" "$2" "$1"; echo "$1"; } | sort -nu
}

train_stage() {  # rounds: numbers to 20 r items, then choices to 10 r, so every kind has train items early
  local r n rounds=$(((train_limit + 19) / 20)) choice_rounds=$(((choice_train_limit + 9) / 10))
  if ((choice_rounds > rounds)); then rounds=$choice_rounds; fi  # each kind reaches its own limit
  for r in $(seq 1 "$rounds"); do
    n=$((20 * r < train_limit ? 20 * r : train_limit))
    for bench in gsm8k svamp multiarith; do
      voters "$bench" train "$n" 1 sc-cot
      voters "$bench" train "$n" 1 sc-pot
    done
    n=$((10 * r < choice_train_limit ? 10 * r : choice_train_limit))
    for bench in aqua mmlu; do voters "$bench" dev "$n" 1 sc-cot; done
  done
}

test_stage() {
  local s n
  for s in $(seq 1 "$test_seeds"); do
    for n in $(steps "$test_limit" 30); do
      for bench in gsm8k svamp; do
        voters "$bench" test "$n" "$s" sc-cot
        voters "$bench" test "$n" "$s" sc-pot
      done
      if [ "$n" -le "$choice_test_limit" ]; then
        voters aqua test "$n" "$s" sc-cot
        voters mmlu val "$n" "$s" sc-cot
      fi
      if [ "$n" -le 30 ]; then
        voters multiarith test "$n" "$s" sc-cot
        voters multiarith test "$n" "$s" sc-pot
      fi
    done
  done
}

score_stage() {  # prose replies without a log-probability: one teacher-forced pass each, banked
  echo "$(date -u +%FT%TZ) commit=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "python experiments/learn_stop_rule.py --collect-only --score" >> "$log"
  python "$(dirname "$0")/learn_stop_rule.py" --store "$store" --draws "$home/runtime-draws-scored.jsonl" \
    --collect-only --score --splits gsm8k:train svamp:train multiarith:train aqua:dev mmlu:dev \
    gsm8k:test svamp:test multiarith:test aqua:test mmlu:val
}

for stage in "${stages[@]}"; do
  case "$stage" in
    train) train_stage ;;
    test) test_stage ;;
    score) score_stage ;;
    *) echo "runtime_bank: unknown stage '$stage'; use train, test and/or score" >&2; exit 2 ;;
  esac
done
exit 0
}
