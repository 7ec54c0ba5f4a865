#!/usr/bin/env bash
# Issue 24's training and held-out evaluation on the 2-core CPU, in resumable stages, on top of the sample bank
# of experiments/adaptive_cpu.sh (stage `train-bank` for training, `bank` for the test items).
#   1. sft: `lemon sft --teacher bank` (TEACHER; bank-pooled: one team per benchmark) on the mixture's TRAIN
#      items: per item the banked team of the best expected reward (one CoT agent, a stopping vote, a 3- or
#      5-vote), written in the `copies` short form, so the data says the team depends on the item. No worker
#      call where the bank holds the item. PROMPT=terse asks the policy with the task alone (its own tokens
#      are cost: issue 24).
#   2. train: GRPO from that policy, arms `cf` (counterfactual credit on the stop rule, the number of copies and
#      the level) and `global` (no counterfactuals), each under TRAIN_SEEDS, config experiments/adaptive_train.yaml
#      (workers.seeds: bank, orchestrator tokens counted in the reward); `cf-tied` is `cf` with a success-tied
#      group's cost contrast in standard units (`credit.tied_cost: 0.5`, docs/results.md "Not measured yet").
#   3. eval: every trained policy on the first LIMIT TEST items of BENCHES x SEEDS seeds, into the bank's store
#      (the same items and seeds as the fixed teams of adaptive_cpu.sh, so every comparison is paired).
#   4. report: lemon report over the store, each trained arm paired against the best fixed team and SFT.
# Every stage resumes: SFT is skipped once sft.json exists, training continues from its checkpoint, evaluation
# from the store. Train and test are disjoint by construction (train vs test splits).
# Usage: LEMON_DATA_DIR=../shared/data [STEPS=30] [N_TRAIN=40] [LIMIT=60] [SEEDS=2] [TRAIN_SEEDS="0 1"]
#        [TEACHER=bank|bank-pooled|bank-budget|bank-budget-programs] [PROMPT=full|terse] [BANK_ITEMS=20 (bank-pooled: choose on the banked
#        items, teach on all N_TRAIN)] [DECISION_WEIGHT=10 (SFT loss weight of the fields the targets differ
#        in)] [N_EVAL=2] [EPOCHS=3] [SFT_SEED=0 (the SFT shuffling seed: a second training seed of the SFT
#        policy goes to its own RUNS_DIR)]
#        [POLICY=HF_DIR (the policy SFT starts from; default SmolLM2-135M)]
#        [ARMS="cf global"] [BENCHES="svamp gsm8k"] [STAGES="sft train eval report"] [STORE=...] [POOL=cpu]
#        bash experiments/adaptive_train.sh [RUNS_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
runs="${1:-runs/adaptive-cpu}"
home="${LEMON_HOME:-$HOME/.cache/lemon}"
store="${STORE:-$home/adaptive-cpu.sqlite}"
pool="${POOL:-cpu}"
stages="${STAGES:-sft train eval report}"
mix="gsm8k,svamp,multiarith"
mkdir -p "$runs"
source "$(dirname "$0")/common.sh"  # import_bank, logged_eval (JOBS, THREADS)
import_bank
git -C "$here" rev-parse HEAD > "$runs/commit.txt" 2>/dev/null || true
has() { [[ " $stages " == *" $1 "* ]]; }

if has sft && [ ! -f "$runs/sft/sft.json" ]; then
  lemon sft --out "$runs/sft" --teacher "${TEACHER:-bank}" --prompt "${PROMPT:-full}" --teacher-pool "$pool" \
    --benchmark "$mix" --limit "${N_TRAIN:-40}" --n-eval "${N_EVAL:-2}" --epochs "${EPOCHS:-3}" \
    --seed "${SFT_SEED:-0}" ${POLICY:+--policy "$POLICY"} \
    ${BANK_ITEMS:+--bank-items "$BANK_ITEMS"} ${DECISION_WEIGHT:+--decision-weight "$DECISION_WEIGHT"}
fi

arms=()
for arm in ${ARMS:-cf global}; do for s in ${TRAIN_SEEDS:-0 1}; do arms+=("$arm-s$s"); done; done
if has train; then
  for name in "${arms[@]}"; do
    [ -d "$runs/$name/final" ] && continue
    flags=(--seed "${name##*-s}"); [ "${name%-s*}" = global ] && flags+=(--no-cf)
    [ "${name%-s*}" = cf-tied ] && flags+=(--set credit.tied_cost=0.5)
    [ -f "$runs/$name/run.json" ] && flags+=(--resume)
    lemon train --out "$runs/$name" --policy "$runs/sft/model" --benchmark "$mix" --limit "${N_TRAIN:-40}" \
      --pool "$pool" --config "$here/adaptive_train.yaml" --steps "${STEPS:-30}" --save-every 5 "${flags[@]}"
  done
fi

if has eval; then
  for bench in ${BENCHES:-svamp gsm8k}; do
    for name in sft "${arms[@]}"; do
      dir="$runs/$name/final"; [ "$name" = sft ] && dir="$runs/sft/model"
      [ -d "$dir" ] || continue
      logged_eval "$store.runs.log" eval "$bench" --method "trained:$dir" --split test --limit "${LIMIT:-60}" \
        --seeds "${SEEDS:-2}" --pool "$pool" --store "$store"
    done
  done
fi

if has report; then
  compare=()
  for name in "${arms[@]}"; do
    [ -d "$runs/$name/final" ] && compare+=(--compare "trained:$runs/$name/final,best" \
      --compare "trained:$runs/$name/final,trained:$runs/sft/model")
  done
  lemon report --store "$store" --file "$runs/report.md" "${compare[@]}"
fi
