#!/usr/bin/env bash
# The GPU proof in one sitting (docs/gpu.md): build the CUDA backend on a lent GPU machine and measure real model
# shapes there, with nothing downloaded there.
#
#   scripts/gpu_proof.sh prepare   # here: fill .gpukit/ (git-ignored, < 64 MiB) with what the lent machine needs
#   scripts/gpu_proof.sh run       # there: the steps, each resumed where the last call stopped; exit 75 = call again
#   scripts/gpu_proof.sh dry-run   # here: the plan, prepare, then every step on a CPU build at the smallest shapes,
#                                  # offline (PIP_NO_INDEX, HF_HUB_OFFLINE, HOME in the state: no ~/.cache/gguf-bench)
#   scripts/gpu_proof.sh plan      # the lent machine's steps, each with the seconds it declares, and their sum
#
# The kit (.gpukit/): the installed llama-cpp-python's sdist, pruned (scripts/gpu_proof.py sdist); the wheels of the
# dependencies the device image lacks, of llama-cpp-python's Python part alone (no libraries: `bindings`) and of
# gguf-bench itself; synthesised headers at real shapes (gguf_bench/models/shapes.py) and the headers of the real
# models cached here; device-call.txt.
# The build: one CMake build of the sdist's llama.cpp (`gguf-bench build-tree --cuda --cuda-arch <the card's>`,
# runtimes/tree_build.py) makes the shared libraries, llama-server, llama-fit-params and llama-gguf-split in
# $STATE/tree; every later step runs with LLAMA_CPP_LIB_PATH=$STATE/tree/bin, so both engines and the tests use it.
# State (.gpukit-state/, never carried) stays on the lent machine between calls while it is held: the venv, the cache
# (the unpacked sdist), the build tree, the twins, every table. Each call copies the tables to $OUT.
# Environment: PYTHON (here: .venv/bin/python, else python3), GPU_PROOF_KIT, GPU_PROOF_STATE, GPU_PROOF_BUDGET (s),
# GPU_PROOF_TREE (dry-run: a complete CPU `build-tree` to reuse, e.g. the tests' cached one; default: build one),
# GPU_PROOF_RESUME=1 (dry-run: keep the state, run the steps not done yet).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
KIT=${GPU_PROOF_KIT:-$ROOT/.gpukit}
STATE=${GPU_PROOF_STATE:-$ROOT/.gpukit-state}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo "$ROOT/.venv/bin/python" || echo python3 )}
START=$(date +%s)
BUDGET=${GPU_PROOF_BUDGET:-540}  # seconds one `run` may take (a device command is cut at 600)
# The device time a session has in all (its start, every command, idle waits and transfers count): the steps' declared
# seconds plus START_S must stay within it, or `plan` (and so `dry-run`) fails. Declared seconds are plans, not
# measurements: each step's table ends with the seconds it took, and the first run's figures replace these.
DEVICE_S=${GPU_PROOF_DEVICE_S:-840}  # 14 minutes of the 15 lent
START_S=150  # the machine's start and the transfers of two calls
BUILD_S=${GPU_PROOF_BUILD_S:-270}  # the CUDA build (one architecture, every core: 214 s on an H200), setup, twins
export PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-160}

say() { echo "gpu-proof: $*"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
again() { say "$1; call run again (exit 75)"; publish; exit 75; }

prepare() {
  local t0 size tree
  t0=$(date +%s)
  rm -rf "$KIT" && mkdir -p "$KIT/wheels" "$KIT/h/headers" "$KIT/h/headers-tiny"
  "$PY" scripts/gpu_proof.py sdist "$KIT/llama_cpp_python-sdist.tar.gz"
  "$PY" scripts/gpu_proof.py missing > "$KIT/missing.txt"
  "$PY" scripts/gpu_proof.py bindings "$KIT/wheels"
  say "wheels for the device (cp312, manylinux): $(tr '\n' ' ' < "$KIT/missing.txt")"
  # shellcheck disable=SC2046
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$KIT/wheels" $(cat "$KIT/missing.txt")
  "$PY" -m pip wheel -q --no-deps -w "$KIT/wheels" "$ROOT"  # the project itself
  "$PY" scripts/gpu_proof.py headers "$KIT/h/headers"
  "$PY" scripts/gpu_proof.py headers "$KIT/h/headers-tiny" --tiny
  tar czf "$KIT/headers.tar.gz" -C "$KIT/h" headers headers-tiny && rm -rf "$KIT/h"
  device_call > "$KIT/device-call.txt"
  size=$(du -sb "$KIT" | cut -f1)
  tree=$(git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  say "prepared $KIT in $(( $(date +%s) - t0 )) s: $(( size / 1024 )) KiB ($(( size / 1048576 )) MiB); with the working tree" \
      "($(( tree / 1024 )) KiB) $(( (size + tree) / 1048576 )) MiB travel per call (limit 64 MiB)"
  [ $(( size + tree )) -lt $(( 64 * 1048576 )) ] || { say "over 64 MiB"; exit 1; }
}

device_call() {
  cat <<'EOF'
run(timeout_s=600, carry=[".gpukit"],
    command="bash scripts/gpu_proof.sh run 2>&1")
# repeat the same call at once (the machine stays warm 30 s) while it exits 75; the tables come back in $OUT:
# gpu-proof-summary.txt (every table) and gpu-proof.tar.gz (tables and logs)
EOF
}

# --- the steps (each skipped once done; state in $STATE) --------------------------------------------------------------

setup() {
  mkdir -p "$STATE/tables" "$STATE/logs" "$STATE/cache/sdist" "$STATE/home"
  # GGUF_BENCH_TEST_CACHE: the tests' shared builds (fit_params_bin, server_bin) are the kit's, not ~/.cache's; nothing
  # is fetched (pip: the kit's wheels only; the hub: offline)
  export GGUF_BENCH_CACHE=$STATE/cache GGUF_BENCH_TEST_CACHE=$STATE/cache GGUF_BENCH_RESULTS=$STATE/results \
    HF_HUB_OFFLINE=1 PIP_NO_INDEX=1 PIP_FIND_LINKS=$KIT/wheels
  TREE=${GPU_PROOF_TREE:-$STATE/tree}
  if [ -n "${DRY:-}" ]; then
    PYV=$PY
    export HOME=$STATE/home XDG_CACHE_HOME=$STATE/home/.cache  # no ~/.cache/gguf-bench: what the steps need is the kit's
  else  # the image's python3 (/opt/torch/.venv: typer, rich, pandas, torch, nvidia-ml-py) and the kit's wheels beside it:
    # a venv made from it, even with --system-site-packages, sees the base interpreter's packages, not the image's
    PYV=python3
    export PYTHONPATH=$STATE/site${PYTHONPATH:+:$PYTHONPATH}
    # the image's numpy, imported before llama.cpp's libraries (every gguf_bench command does), made each model load
    # segfault in llama.cpp's init_tokenizer; with the system's libstdc++ preloaded it loads (H200, 2026-11-28)
    local cxx=/lib/x86_64-linux-gnu/libstdc++.so.6
    [ -f "$cxx" ] && export LD_PRELOAD=$cxx${LD_PRELOAD:+:$LD_PRELOAD}
  fi
  [ -f "$STATE/setup.done" ] && return
  tar xzf "$KIT/llama_cpp_python-sdist.tar.gz" -C "$STATE/cache/sdist"
  tar xzf "$KIT/headers.tar.gz" -C "$STATE"
  if [ -z "${DRY:-}" ]; then
    "$PYV" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$STATE/site" "$KIT"/wheels/*.whl
  fi
  {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "host: $(uname -srm), $(nproc) cores, python $("$PYV" -c 'import platform; print(platform.python_version())')"
    if command -v nvidia-smi >/dev/null; then
      echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader)"
    else
      echo "gpu: none (nvidia-smi not found): CPU build, smallest shapes (dry-run)"
    fi
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"
    echo "cmake: $(cmake --version | head -1)"
    echo "llama-cpp-python: $("$PYV" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"
  } > "$STATE/tables/machine.txt"
  touch "$STATE/setup.done"
}

# the one build's libraries for the Python engine, its llama-server and tools for the rest (runtimes/tree_build.py)
use_tree() { export LLAMA_CPP_LIB_PATH=$TREE/bin; }

build() {
  [ -f "$STATE/build.done" ] && { use_tree; return; }
  local arch
  if [ -n "${DRY:-}" ]; then  # the same command with the CPU backend (GPU_PROOF_TREE: a complete one, reused)
    local t0 cmds; t0=$(date +%s)
    if [ -n "${GPU_PROOF_TREE:-}" ]; then  # still: the pruned sources configure with the tree's flags, UI step included
      read -ra cmds <<< "$("$PYV" -c 'from gguf_bench.runtimes.tree_build import cmake_flags; print(*cmake_flags("cpu"))')"
      cmake -S "$(echo "$STATE"/cache/sdist/llama_cpp_python-*/)vendor/llama.cpp" -B "$STATE/configure" "${cmds[@]}" \
        > "$STATE/logs/configure.log" 2>&1 && cmake --build "$STATE/configure" --target llama-ui-assets \
        >> "$STATE/logs/configure.log" 2>&1 || { tail -20 "$STATE/logs/configure.log"; exit 1; }
      echo "dry-run: the pruned sdist configured with build-tree's CPU flags in $(( $(date +%s) - t0 )) s; the build" \
           "reuses GPU_PROOF_TREE=$TREE" > "$STATE/tables/build.txt"
    fi
    echo "\$ $PYV -m gguf_bench.cli build-tree --cpu -j $(nproc) -o $TREE" >> "$STATE/tables/build.txt"
    "$PYV" -m gguf_bench.cli build-tree --cpu -j "$(nproc)" -o "$TREE" >> "$STATE/tables/build.txt" 2>&1 \
      || { cat "$STATE/tables/build.txt"; say "the build failed"; exit 1; }
    echo "build-tree --cpu: $(( $(date +%s) - t0 )) s (on the GPU machine: --cuda --cuda-arch <nvidia-smi compute_cap>)" \
      >> "$STATE/tables/build.txt"
    grep -h '^\$ ' "$TREE/build.log" >> "$STATE/tables/build.txt" 2>/dev/null || true
    LLAMA_CPP_LIB_PATH="$TREE/bin" "$PYV" scripts/gpu_proof.py backend >> "$STATE/tables/build.txt"
    touch "$STATE/build.done"; use_tree; return
  fi
  if [ ! -f "$STATE/build.started" ]; then
    arch=$("$PYV" scripts/gpu_proof.py arch)
    cat > "$STATE/build.sh" <<EOF
set -e
cd "$ROOT"
t0=\$(date +%s)
echo "\$ $PYV -m gguf_bench.cli build-tree --cuda --cuda-arch $arch -j $(nproc) -o $TREE"
# build-tree's own call, not the command: gguf_bench.cli imports llama_cpp, which cannot load before its libraries exist
"$PYV" -c 'import sys; from pathlib import Path; from gguf_bench.runtimes.tree_build import build_tree
build_tree("cuda", Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])' "$TREE" $(nproc) $arch
t1=\$(date +%s)
echo "build-tree --cuda (one CMake build: libraries, llama-server, llama-fit-params, llama-gguf-split): \$((t1 - t0)) s"
LLAMA_CPP_LIB_PATH="$TREE/bin" "$PYV" scripts/gpu_proof.py backend
EOF
    date +%s > "$STATE/build.started"
    setsid bash -c "bash '$STATE/build.sh' > '$STATE/logs/build.log' 2>&1; echo \$? > '$STATE/build.rc'" < /dev/null &
    say "build started (CUDA architectures $arch), detached; log $STATE/logs/build.log"
  fi
  while [ ! -f "$STATE/build.rc" ]; do
    [ "$(left)" -gt 30 ] || again "still building ($(( $(date +%s) - $(cat "$STATE/build.started") )) s so far): $(tail -c 300 "$STATE/logs/build.log" | tr '\n' ' ')"
    sleep 10
  done
  { cat "$STATE/logs/build.log"; echo "cmake commands:"; grep -h '^\$ ' "$TREE/build.log" 2>/dev/null || true
  } > "$STATE/tables/build.txt"
  [ "$(cat "$STATE/build.rc")" = 0 ] || { tail -40 "$STATE/logs/build.log"; say "the build failed (the next call builds again)"
    publish; rm -f "$STATE/build.started" "$STATE/build.rc"; exit 1; }
  touch "$STATE/build.done"; use_tree
}

headers_dir() { [ -n "${DRY:-}" ] && echo "$STATE/headers-tiny" || echo "$STATE/headers"; }

twins() {
  [ -f "$STATE/twins.done" ] && return
  mkdir -p "$STATE/twins"
  : > "$STATE/tables/twins.txt"
  for h in "$(headers_dir)"/*.gguf; do
    "$PYV" -m gguf_bench.cli twin "$h" -o "$STATE/twins/$(basename "$h")" >> "$STATE/tables/twins.txt"
  done
  touch "$STATE/twins.done"
}

# the pairs: target and draft shape names (shapes.SHAPES), the dry-run's smallest
pairs() { if [ -n "${DRY:-}" ]; then echo "llama:tiny-llama:tiny-llama-draft qwen:tiny-qwen2:tiny-qwen2-draft"
          else echo "llama:llama3-8b:llama3.2-1b qwen:qwen2.5-7b:qwen2.5-0.5b"; fi; }

# step NAME SECONDS COMMAND...: run once (marked done), within what is left of this call, output to tables/NAME.txt;
# with PLAN set, only declared (a line of the plan)
step() {
  local name=$1 need=$2; shift 2
  [ -n "${PLAN:-}" ] && { printf '%-16s %5d s\n' "$name" "$need"; return; }
  [ -f "$STATE/$name.done" ] && return
  [ "$(left)" -gt "$need" ] || again "$name needs about $need s and $(left) s are left"
  say "$name: $*"
  local t0; t0=$(date +%s)
  if timeout "$(( $(left) - 10 ))" "$@" > "$STATE/tables/$name.txt" 2> "$STATE/logs/$name.err"; then
    echo "($name: $(( $(date +%s) - t0 )) s)" >> "$STATE/tables/$name.txt"
    touch "$STATE/$name.done"
  else
    local rc=$?
    tail -20 "$STATE/logs/$name.err"
    [ $rc = 124 ] && again "$name ran out of this call's time"
    say "$name failed (exit $rc)"; publish; exit 1
  fi
}

# two -ngl settings of one pair in one sweep (interleaved, so the deploy line's comparison between them is paired), a
# short prompt and a long one (timed: the drafter's prompt cost shows in TTFT), then each row's TTFT and its paired
# cost, joules per token (NVML) and share of the card's bandwidth (gpu_proof.py rows); args: python target draft
# ngl-list threads state prompt-tokens engine
NGL_SWEEP='py=$0 st=$5 name=gpu-$7; rm -f "$GGUF_BENCH_RESULTS/$name.jsonl"
"$py" scripts/gpu_proof.py prompts "$st/prompts.jsonl" --tokens "$6" --model "$1" &&
"$py" -m gguf_bench.cli sweep --engine "$7" --target "$1" --draft "$2" -K 4 -ngl "$3" -ngld all -n 32 -r 3 -c 4096 \
  --threads "$4" --prompts "$st/prompts.jsonl" --name "$name" &&
"$py" -m gguf_bench.cli report "$GGUF_BENCH_RESULTS/$name.jsonl" --by prompt --format json -o "$st/logs/$name.json" &&
"$py" scripts/gpu_proof.py rows "$st/logs/$name.json" --bandwidth "$st/tables/bandwidth.txt"'

measure() {
  local t="$STATE/twins" h files=() p name tgt drf; h=$(headers_dir)
  for p in $(pairs); do IFS=: read -r name tgt drf <<< "$p"; files+=("$t/$tgt.gguf" "$t/$drf.gguf"); done
  if [ -z "${DRY:-}" ]; then  # the lent machine: most valuable first, within the plan (gpu_plan)
    GGUF_BENCH_REQUIRE_GPU=1 step offload 40 "$PYV" -m pytest -p no:cacheprovider -q -m gpu tests/test_offload.py
    for p in $(pairs); do
      IFS=: read -r name tgt drf <<< "$p"
      step "plan-cli-$name" 5 "$PYV" -m gguf_bench.cli plan --target "$h/$tgt.gguf" --draft "$h/$drf.gguf" --ctx 4096
    done
    IFS=: read -r name tgt drf <<< "$(pairs | cut -d' ' -f1)"  # the first pair: Llama-3-8B with Llama-3.2-1B
    step bandwidth 15 "$PYV" scripts/gpu_proof.py bandwidth
    step "sweep-ngl-$name" 60 bash -c "$NGL_SWEEP" "$PYV" "$t/$tgt.gguf" "$t/$drf.gguf" all,30 "$(nproc)" "$STATE" 1500 \
      python
    step "sweep-server-$name" 45 bash -c "$NGL_SWEEP" "$PYV" "$t/$tgt.gguf" "$t/$drf.gguf" all "$(nproc)" "$STATE" 1500 \
      server
    step plan 60 "$PYV" scripts/bench_plan.py "${files[@]}" --ctx 512,4096 --max-tensor-mib 1000000
    # the gain at a known acceptance (1: agreeing twins of the pair) against tune's prediction, then the expert tax:
    # the verify curve of a MoE twin beside the dense target's
    step "accept-$name" 40 "$PYV" scripts/bench_known_acceptance.py --target "$h/$tgt.gguf" --draft "$h/$drf.gguf" \
      -K 1,2,4,8 -n 64 -r 3 -ngl all -ngld all --threads "$(nproc)"
    step verify-moe 60 "$PYV" scripts/bench_verify_curve.py "$t/qwen3-30b-a3b.gguf" "$t/$tgt.gguf" -ngl all \
      --tokens 1-9 --reps 10 --threads "$(nproc)"
    step "tune-$name" 30 "$PYV" -m gguf_bench.cli tune --twin --target "$h/$tgt.gguf" --draft "$h/$drf.gguf" \
      -K 1,2,3,4,6,8,12,16 -ngl all -ngld all --acceptance 0.6,0.8 -n 32 --reps 2 --prompt-ids code-short \
      --name "gpu-tune-$name"
    step "engines-$name" 40 "$PYV" scripts/bench_engines.py --target "$t/$tgt.gguf" --draft "$t/$drf.gguf" -K 4 \
      --temp 0,0.7 -n 64 --reps 2 --threads "$(nproc)" -ngl all -ngld all
    return
  fi
  # GGUF_BENCH_GPU_DRY_RUN: each test of tests/test_offload.py builds every fixture it asks for (the kit's cache and
  # build: llama-fit-params from the tree), then skips its GPU assertions
  GGUF_BENCH_GPU_DRY_RUN=1 step offload 60 "$PYV" -m pytest -p no:cacheprovider -q -rs -m gpu tests/test_offload.py
  [ -n "${PLAN:-}" ] || { echo "offload: a CPU build sees no GPU device: every test's fixtures ran, its GPU assertions" \
         "skipped (on the lent machine: they run, and a skip fails)"
    echo "plan: bench_plan.py needs a GPU device (llama.cpp's allocations on it): not run here"; } > "$STATE/tables/skipped.txt"
  local server=()
  [ -n "${PLAN:-}" ] || "$PYV" -c 'from gguf_bench.runtimes.server_build import find_server; find_server(None)' \
    2>/dev/null || server=(--no-server)
  step bandwidth 10 "$PYV" scripts/gpu_proof.py bandwidth
  [ -n "${PLAN:-}" ] || echo "bandwidth: torch with a CUDA device measures the card's copy bandwidth; none here" \
    >> "$STATE/tables/skipped.txt"
  IFS=: read -r name tgt drf <<< "$(pairs | cut -d' ' -f1)"
  step "sweep-ngl-$name" 120 bash -c "$NGL_SWEEP" "$PYV" "$t/$tgt.gguf" "$t/$drf.gguf" all,1 1 "$STATE" 600 python
  if [ ${#server[@]} = 0 ]; then
    step "sweep-server-$name" 120 bash -c "$NGL_SWEEP" "$PYV" "$t/$tgt.gguf" "$t/$drf.gguf" all 1 "$STATE" 600 server
  elif [ -z "${PLAN:-}" ]; then
    echo "sweep-server-$name: no llama-server built here" >> "$STATE/tables/skipped.txt"
  fi
  step "accept-$name" 60 "$PYV" scripts/bench_known_acceptance.py --target "$h/$tgt.gguf" --draft "$h/$drf.gguf" \
    -K 1,2,4,8 -n 8 -r 1 --threads 1 --tune-reps 1
  step verify-moe 30 "$PYV" scripts/bench_verify_curve.py "$t/tiny-qwen3moe.gguf" "$t/$tgt.gguf" --tokens 1-9 \
    --reps 1 --threads 1 --prompt 32 --ctx 256
  for p in $(pairs); do
    IFS=: read -r name tgt drf <<< "$p"
    step "plan-cli-$name" 60 "$PYV" -m gguf_bench.cli plan --target "$h/$tgt.gguf" --draft "$h/$drf.gguf" --ctx 512 \
      --vram 8GB
    step "tune-$name" 120 "$PYV" -m gguf_bench.cli tune --twin --target "$h/$tgt.gguf" --draft "$h/$drf.gguf" -K 1,2,4 \
      --acceptance 0.6,0.8 -n 8 --reps 1 --threads 1 --prompt-ids code-short --name "gpu-tune-$name"
    step "engines-$name" 120 "$PYV" scripts/bench_engines.py --target "$t/$tgt.gguf" --draft "$t/$drf.gguf" -K 2 \
      --temp 0,0.7 -n 8 --reps 1 --threads 1 "${server[@]}"
  done
}

publish() {  # every table so far into $OUT (at most 8 files come back): one summary, one archive
  local out=${OUT:-$STATE/out}
  mkdir -p "$out"
  for f in "$STATE"/tables/*.txt; do [ -f "$f" ] && { echo "=== $(basename "$f")"; cat "$f"; }; done \
    > "$out/gpu-proof-summary.txt" 2>/dev/null || true
  tar czf "$out/gpu-proof.tar.gz" -C "$STATE" tables logs 2>/dev/null || true
}

# the plan of the lent machine's run: build, then the measurements in the order they run (most valuable first, so a
# call cut short has written the most important tables), their declared seconds and the sum against DEVICE_S
gpu_plan() {
  local lines total PYV=${PYV:-$PY}
  lines=$(printf '%-16s %5d s\n' build "$BUILD_S"; (PLAN=1 DRY= measure))
  total=$(( START_S + $(awk '{ s += $2 } END { print s }' <<< "$lines") ))
  say "the lent machine's plan (declared seconds; the machine's start and transfers $START_S s):"
  echo "$lines"
  say "sum $total s of $DEVICE_S s"
  [ "$total" -le "$DEVICE_S" ] || { say "the plan does not fit: $total s > $DEVICE_S s; cut or shorten steps"; return 1; }
}

# the tables a complete run writes, as `check` takes them: setup's, the build's, the twins' and each measuring step's
# (the steps `measure` declares, in this run's mode)
tables() { echo "machine,build,twins,$( (PLAN=1 measure) | awk '{ print $1 }' | paste -sd, -)"; }

run_steps() {
  setup; build
  # the dry-run's build (minutes on a CPU) stands for the lent machine's first call; its steps run as the second
  [ -n "${DRY:-}" ] && START=$(date +%s)
  twins; measure; publish
  # the lent machine's run must show a CUDA device; the dry-run's is the CPU build, declared (--cpu)
  "$PYV" scripts/gpu_proof.py check "$STATE/tables" --tables "$(tables)" ${DRY:+--cpu}
  say "done in $(( $(date +%s) - START )) s; tables in $STATE/tables and ${OUT:-$STATE/out}"
}

case "${1:-}" in
  prepare) prepare ;;
  plan) gpu_plan ;;
  run) [ -f "$KIT/headers.tar.gz" ] || { say "no kit at $KIT: run prepare first (here), carry .gpukit"; exit 1; }
       run_steps ;;
  dry-run)
    gpu_plan
    prepare
    say "the device call (the same kit; $(device_call | wc -c) characters):"
    device_call
    export DRY=1
    unset OUT  # the dry-run publishes into its state folder, never into a folder the caller's $OUT names
    [ -n "${GPU_PROOF_RESUME:-}" ] || rm -rf "$STATE"  # GPU_PROOF_RESUME=1: the steps not yet done, on the same state
    START=$(date +%s)
    run_steps ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
