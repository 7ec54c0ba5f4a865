# Sourced by the experiment scripts (adaptive_cpu.sh, adaptive_train.sh, choice_team.sh, six_benchmarks.sh): what
# they share.

# The committed sample bank (`lemon cache export`, experiments/bank/README.md) seeds the LLM cache, so a new
# machine replays what earlier ones drew instead of drawing it again (the import adds only missing keys).
# BANK=PATH picks another file; a missing file imports nothing.
import_bank() {
  local bank="${BANK:-$(dirname "${BASH_SOURCE[0]}")/bank/cpu.jsonl.gz}"
  if [ -f "$bank" ]; then lemon cache import "$bank"; fi
}

# JOBS processes of each evaluation share its items through the store's claims, each model at THREADS threads.
# On these 2 cores `JOBS=2 THREADS=1` decodes 1.8x the tokens of one process at 2 threads (P8,
# benchmarks/bench_processes.py): llama.cpp's threads wait passively here (OMP_WAIT_POLICY, lemon/__init__.py).
jobs="${JOBS:-1}"
thread_args=()
if [ -n "${THREADS:-}" ]; then thread_args=(--threads "$THREADS"); fi
# A script's background jobs start with SIGINT ignored, so Ctrl-C (or a TERM to the script) would end it and leave
# them running: it hands them TERM, which `lemon` takes as Ctrl-C (finished items kept, claims released), waits
# for them, and stops with 130.
lemon_jobs() {  # one `lemon eval`, as JOBS processes on the same run; fails if any of them does
  if [ "$jobs" = 1 ]; then lemon "$@" "${thread_args[@]}"; return; fi
  local pids=() i status=0
  for ((i = 0; i < jobs; i++)); do lemon "$@" "${thread_args[@]}" & pids+=($!); done
  trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait; exit 130' INT TERM
  for i in "${pids[@]}"; do wait "$i" || status=$?; done
  trap - INT TERM
  return "$status"
}

# What ran is recorded beside the results: each evaluation's command line, commit and processes go to the store's
# runs log (LOG) before it starts, so a cell can be traced to the code that drew it.
logged_eval() {  # LOG lemon-args...: one resumable `lemon eval` (as lemon_jobs), its line appended to LOG first
  local log="$1" commit
  shift
  # LEMON_COMMIT names it where the tree is a copy without .git (a lent GPU machine's, experiments/gpu.sh)
  commit="$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --short HEAD 2>/dev/null || echo "${LEMON_COMMIT:-unknown}")"
  echo "$(date -u +%FT%TZ) commit=$commit lemon $* jobs=$jobs threads=${THREADS:-all}" >> "$log"
  lemon_jobs "$@"
}
