#!/usr/bin/env bash
# The choice kind's default team (prompts/teams.yaml `choice`), measured on items the six-benchmark table does not
# score: the first LIMIT `dev` items of AQuA and MMLU, one seed. Why: the template's choice team (two CoT voters at
# `large`, one at `medium`, no stop rule) was never measured on multiple choice, and on the table's test items it
# is dominated by one agent on MMLU and AQuA (docs/results.md; chosen since: agree 2 of 3 at `large`, docs/results.md
# "The choice kind's team"). Stages, each resumable from the store:
#   the 5-voter bank (adaptive_cpu.sh `bank`), vanilla, the anchors replayed from it (`singles anchors`), agree 2
#   of 3, and the template's own team (the team before had a `medium` voter, a new draw). Then choose offline:
#   python experiments/stop_rules_table.py --store STORE --split dev --benchmarks aqua mmlu --orders 24
# Usage: LEMON_DATA_DIR=../shared/data [LIMIT=20 JOBS=1 THREADS=1] bash experiments/choice_team.sh [STORE]
set -euo pipefail
{  # read whole before it runs: an edit to this file cannot reach a run in progress
here="$(cd "$(dirname "$0")" && pwd)"
store="${1:-${LEMON_HOME:-$HOME/.cache/lemon}/choice-team.sqlite}"
limit="${LIMIT:-20}"
STORE="$store" BENCHES="aqua mmlu" SPLIT=dev LIMIT="$limit" SEEDS=1 bash "$here/adaptive_cpu.sh" bank singles anchors
source "$here/common.sh"  # logged_eval (JOBS, THREADS)
for bench in aqua mmlu; do
  for method in "esc --agents 3 --level large" "template"; do
    read -r -a extra <<< "$method"
    args=(eval "$bench" --split dev --method "${extra[@]}" --limit "$limit" --seeds 1 --pool "${POOL:-cpu}" --store "$store")
    logged_eval "$store.runs.log" "${args[@]}"
  done
done
exit 0
}
