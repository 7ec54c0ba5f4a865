#!/usr/bin/env bash
# Issue 10's learning experiment on the 2-core CPU (results: docs/results.md, "Learning on the CPU").
#   1. SFT warm start with the LIBRARY teacher: one team per GSM8K-train task drawn uniformly from the
#      default team and the fixed baselines at every level (format + a uniform prior; no model call).
#   2. GRPO + counterfactual credit (cf: the span term; cf-pairwise: --cf-form pairwise) and GRPO global-only
#      from that policy, same tasks, seeds and steps, on the MultiArith TRAIN split with the real `cpu` pool
#      (config: experiments/learning_cpu.yaml; worker seeds per task, so a team written again is an LLM-cache
#      hit and the arms see the same worker draws).
#   3. Held-out evaluation on the first LIMIT MultiArith TEST items x SEEDS seeds, the same for every method:
#      the trained arms, SFT-only, one agent (vanilla, cot) at every level, then the costlier
#      comparisons (default team, sc-cot, prompted, multi-agent baselines at large) while time allows.
#   4. lemon report: accuracy mean +- std, worker tokens per item, exact McNemar tests, the plots.
# Every stage resumes (SFT is skipped once sft.json exists, training continues from its last checkpoint,
# evaluation from the store). Train and test are disjoint by construction (train vs test splits).
# Usage: LEMON_DATA_DIR=../shared/data [STEPS=10] [TASKS=24] [LIMIT=60] [SEEDS=2] [STAGES="sft train eval report"]
#        [ARMS="cf global cf-pairwise cf-discount"] [METHODS="cf-pairwise sft cot@large ..."]
#        [EXTRA="prompted sc-cot@large ..."]
#        bash experiments/learning_cpu.sh [RUNS_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
runs="${1:-runs/learning-cpu}"
steps="${STEPS:-10}"
limit="${LIMIT:-60}"
seeds="${SEEDS:-2}"
n_tasks="${TASKS:-24}"  # MultiArith train items trained on: 10 steps x 2 tasks: the first 20; STEPS=30 makes 2.5 passes, so repeats hit the cache
stages="${STAGES:-sft train eval report}"
store="$runs/eval.sqlite"
mkdir -p "$runs"
git -C "$here" rev-parse HEAD > "$runs/commit.txt" 2>/dev/null || true
has() { [[ " $stages " == *" $1 "* ]]; }

if has sft && [ ! -f "$runs/sft/sft.json" ]; then
  lemon sft --out "$runs/sft" --teacher library --teacher-pool cpu --benchmark gsm8k \
    --limit "${N_TRAIN:-160}" --epochs "${EPOCHS:-2}" --seed 0
fi

train_arm() {  # $1 = cf | global | cf-discount (the family sampler's confidence discount) | cf-pairwise
  local flags=() resume=()
  [ "$1" = global ] && flags=(--no-cf)
  [ "$1" = cf-discount ] && flags=(--confidence-discount)
  [ "$1" = cf-pairwise ] && flags=(--cf-form pairwise)
  [ -f "$runs/$1/run.json" ] && resume=(--resume)  # also a run stopped before its first checkpoint
  lemon train --out "$runs/$1" --policy "$runs/sft/model" --benchmark multiarith --limit "$n_tasks" --pool cpu \
    --config "$here/learning_cpu.yaml" --steps "$steps" --save-every 5 --seed 0 "${flags[@]}" "${resume[@]}"
}
if has train; then
  for arm in ${ARMS:-cf global cf-pairwise}; do
    [ -d "$runs/$arm/final" ] || train_arm "$arm"
  done
  trained=(); for arm in cf global cf-discount cf-pairwise; do [ -d "$runs/$arm/final" ] && trained+=("$runs/$arm"); done
  lemon plot "${trained[@]}" --smooth 5 --file "$runs/training.png"
fi

cf="trained:$runs/cf/final"; global="trained:$runs/global/final"; sft="trained:$runs/sft/model"
pairwise="trained:$runs/cf-pairwise/final"
common=(multiarith --limit "$limit" --seeds "$seeds" --pool cpu --max-tokens 256 --store "$store")
# Evaluation order (METHODS, then EXTRA): cf / global / cf-discount / cf-pairwise / sft name the trained policies,
# METHOD@LEVEL a fixed baseline at one level. With 2 cores the whole list takes hours; put what a comparison
# needs first.
methods="${METHODS:-cf-pairwise cf global sft cot@large vanilla@large cot@medium vanilla@medium cot@small vanilla@small}"
if has eval; then
  for entry in $methods ${EXTRA:-}; do  # e.g. EXTRA="template prompted sc-cot@large chain@large"
    method="${entry%@*}"; level=(); [ "$method" != "$entry" ] && level=(--level "${entry#*@}")
    case "$method" in cf) method="$cf" ;; global) method="$global" ;; sft) method="$sft" ;;
      cf-discount | cf-pairwise) method="trained:$runs/$method/final" ;; esac
    lemon eval "${common[@]}" --method "$method" "${level[@]}"
  done
fi

if has report; then
  lemon report --store "$store" --file "$runs/report.md" --plot "$runs/accuracy-vs-tokens.png" \
    --compare "$cf,$global" --compare "$cf,$sft" --compare "$global,$sft" --compare "$cf,best" \
    --compare "$pairwise,$global" --compare "$pairwise,$sft" --compare "$pairwise,best"
fi
