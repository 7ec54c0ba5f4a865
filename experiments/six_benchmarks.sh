#!/usr/bin/env bash
# Issue 25's six-benchmark table: every fixed baseline at `large` (vanilla, cot, sc-cot, the esc / asc stopping
# anchors, the logprob gate and, on HumanEval, the examples gate (exsc), chain, tree, complete, random), the
# default template and the trained policies, on MMLU, GSM8K, AQuA, MultiArith, SVAMP and HumanEval `test` (MMLU:
# its `val` evaluation split), the first LIMIT items x SEEDS seeds, the same items and seeds for every method,
# then `lemon report` with paired tests against the best baseline. Resumable: every stage resumes (evaluations
# from the store, training from its run directory), so re-run it after an interruption.
#
# Order: cheapest methods first and one benchmark-method pair at a time, so a partial run is already a table;
# one CoT agent is the 5-vote's first voter, so the cut replies of the cheap cot cell say whether the benchmark's
# reply limit fits before the 5-vote is drawn; sc-cot with 5 voters fills the sample bank, after which esc / asc
# / the gate of the same items cost no worker call (runtime.executor.sample_slot). Then the trained policies'
# training, the orchestrators (the template and the trained policies), and last the multi-agent fixed
# topologies, the costliest and in the paper the weakest. On these 2 cores one `large` agent takes ~20 s per
# item: the whole table at 30 x 2 is days of CPU, so it runs in the background over several working periods
# (say how far it got). On a GPU machine the same command with LEMON_GPU_LAYERS=-1 (or a served pool:
# POOL=FILE) and LIMIT=all (every item of each split) runs it at full size.
#
# Trained policies. TRAINED=auto (the default) trains the table's own with issue 24's recipe (r8), each stage
# resumable: the 5-voter prose and program banks of the TRAIN items of GSM8K, SVAMP and MultiArith
# (adaptive_cpu.sh train-bank train-program-bank, TRAIN_LIMIT items each, into a store of their own), SFT of
# POLICY on the program-menu bank teacher (N_TRAIN items a benchmark, the team of each chosen on the banked
# ones), then GRPO with counterfactual credit over the banked items (adaptive_train.sh: arm `cf`, seed 0, STEPS
# steps), into POLICY_RUNS. The SFT policy and the GRPO policy then enter the table like every method; they are
# trained on the three math benchmarks only, so their MMLU, AQuA and HumanEval cells measure transfer.
# TRAINED="DIR ..." evaluates policies trained elsewhere instead (a card, `lemon cache card`, replays one's specs
# from the bank without its weights); TRAINED=bank the committed cards (experiments/bank/policies/*.json: the
# table's policies of 2026-11-29, no training and no weights); TRAINED=none leaves them out.
#
# Parts. PARTS (default all five, in this order: baselines policies orchestrators topologies report) runs some.
# The orchestrators' and topologies' evaluations need no trained policy (the orchestrators part takes the ones
# that exist), so a second invocation on the same store may run them while the first trains: the policies'
# SFT teacher keeps one core busy, and `PARTS="orchestrators topologies" JOBS=1 THREADS=1` fills the other; the
# store's claims share each evaluation's items, and the first joins whatever is unfinished when it gets there.
#
# Usage: LEMON_DATA_DIR=../shared/data [LIMIT=30|all SEEDS=2 POOL=cpu BENCHES="..."] [JOBS=2 THREADS=1 (on 2 cores)]
#          [TRAINED=auto|bank|none|"DIR ..."] [POLICY_RUNS=DIR TRAIN_LIMIT=20 N_TRAIN=60 STEPS=30 POLICY=HF_DIR]
#          [PARTS="baselines policies orchestrators topologies report"] [TOPOLOGIES="chain tree complete random"]
#          bash experiments/six_benchmarks.sh [STORE]
set -euo pipefail
{  # read whole before it runs: an edit to this file (a pull, a fix) cannot reach a run in progress
here="$(cd "$(dirname "$0")" && pwd)"
home="${LEMON_HOME:-$HOME/.cache/lemon}"
store="${1:-$home/six-benchmarks.sqlite}"
limit="${LIMIT:-30}"
seeds="${SEEDS:-2}"
pool="${POOL:-cpu}"
log="$store.runs.log"
all_parts="baselines policies orchestrators topologies report"
read -r -a parts <<< "${PARTS:-$all_parts}"
for part in "${parts[@]}"; do
  if [[ " $all_parts " != *" $part "* ]]; then
    echo "six_benchmarks: unknown part '$part' in PARTS; use some of: $all_parts" >&2; exit 2
  fi
done
wants() { [[ " ${parts[*]} " == *" $1 "* ]]; }  # part: whether PARTS names it
source "$here/common.sh"  # import_bank, logged_eval (JOBS, THREADS)
import_bank
read -r -a benches <<< "${BENCHES:-multiarith svamp gsm8k aqua mmlu humaneval}"
read -r -a topologies <<< "${TOPOLOGIES:-chain tree complete random}"  # the topologies part's methods

# Worker tokens per reply: each benchmark's own, `lemon eval`'s default (384; AQuA and MMLU 1,024: their
# modules say why). MAX_TOKENS_<BENCHMARK> (e.g. MAX_TOKENS_AQUA=768) overrides; a cell at another limit says so.
evaluate() {  # benchmark method [extra args]: one resumable evaluation, recorded in the log first
  local bench="$1" method="$2" tokens="MAX_TOKENS_${1^^}"
  shift 2
  local args=(eval "$bench" --method "$method" --seeds "$seeds" --pool "$pool" --store "$store")
  if [ "$limit" != all ]; then args+=(--limit "$limit"); fi
  if [ -n "${!tokens:-}" ]; then args+=(--max-tokens "${!tokens}"); fi
  args+=("$@")
  logged_eval "$log" "${args[@]}"
}

train_policies() {  # RUNS_DIR: the TRAIN-item banks, SFT, GRPO (+CF); each stage resumes or is skipped when done
  local runs="$1" train_store="${store%.sqlite}-train.sqlite" n_bank="${TRAIN_LIMIT:-20}"
  STORE="$train_store" TRAIN_LIMIT="$n_bank" bash "$here/adaptive_cpu.sh" train-bank train-program-bank &&
  STORE="$train_store" TEACHER=bank-budget-programs PROMPT=terse BANK_ITEMS="$n_bank" N_TRAIN="${N_TRAIN:-60}" \
    N_EVAL="${N_EVAL:-5}" DECISION_WEIGHT=10 STAGES=sft bash "$here/adaptive_train.sh" "$runs" &&
  STORE="$train_store" N_TRAIN="$n_bank" ARMS=cf TRAIN_SEEDS=0 STAGES=train bash "$here/adaptive_train.sh" "$runs"
}

baselines() {
  for bench in "${benches[@]}"; do
    evaluate "$bench" vanilla --level large
    evaluate "$bench" cot --level large  # the 5-vote's first voter: its cut replies show a short limit early
    evaluate "$bench" sc-cot --level large --agents 5
    for method in esc asc gate; do evaluate "$bench" "$method" --level large; done
    # the examples gate reads a function's docstring examples: code only (its voters are sc-cot's, no worker call)
    if [ "$bench" = humaneval ]; then evaluate "$bench" exsc --level large; fi
  done
}

if wants baselines; then baselines; fi
trained="${TRAINED:-auto}" failed=""
if [ "$trained" = auto ]; then  # a failed training leaves the rest of the table to run, and the exit status to say so
  runs="${POLICY_RUNS:-$home/six-benchmarks-policy}" trained=""
  if wants policies; then train_policies "$runs" || failed="training the policies failed (above)"; fi
  for dir in "$runs/sft/model" "$runs/cf-s0/final"; do if [ -d "$dir" ]; then trained+=" $dir"; fi; done
elif [ "$trained" = bank ]; then  # the committed cards: the table's policies replayed from the bank, no weights
  trained="$(realpath --relative-to="$PWD" "$here"/bank/policies/*.json)"  # as a user writes them, from here
elif [ "$trained" = none ]; then
  trained=""
fi
if wants orchestrators; then
  for bench in "${benches[@]}"; do
    evaluate "$bench" template
    for policy in $trained; do evaluate "$bench" "trained:$policy"; done
  done
fi
if wants topologies; then
  for bench in "${benches[@]}"; do
    for method in "${topologies[@]}"; do evaluate "$bench" "$method" --level large; done
  done
fi
if wants report; then  # paired tests against the best fixed baseline of each benchmark (any level for orchestrators),
  # the headline's tests pooled over the benchmarks (docs/results.md: each row against the best, and the default
  # against a rule of one team per answer kind, written out and the most accurate one), and where each
  # multi-agent team lost its answer (--replies)
  compare=(--compare "vanilla,best" --compare "template,best")
  for row in vanilla cot sc-cot template; do compare+=(--pooled "$row,best"); done
  compare+=(--pooled "template,number=esc/choice=esc/code=exsc" --pooled "template,kinds")
  compare+=(--pooled "number=esc/choice=esc/code=exsc,best")  # the fixed rule's own row
  for policy in $trained; do compare+=(--compare "trained:$policy,best" --pooled "trained:$policy,best"); done
  # the terminal gets tables fitted to its width; the Markdown (every row, for docs/results.md) goes to a file
  lemon report --store "$store" --replies "${compare[@]}" --file "${store%.sqlite}-report.md"
fi
if [ -n "$failed" ]; then echo "six_benchmarks: $failed; the table has the policies that exist:${trained:- none}" >&2; exit 1; fi
exit 0
}
