#!/usr/bin/env bash
# Runs ON the GPU machine (x86-64, CUDA toolkit in /usr/local/cuda, NCCL, python3 with PyTorch, no
# network), from the repository root with .gpu_debs/ carried along (scripts/gpu_prepare.sh makes it
# here): unpacks those Debian packages into build-gpu/prefix/ (never into /), builds the CUDA/NCCL
# configuration, runs the GPU tests group by group, then benchmarks the step against PyTorch
# autocast + GradScaler on the same model and batch, measured in the same run. Prints PASS/FAIL
# lines and a table; writes the table (and logs) to $OUT when OUT is set. Exits non-zero if a build
# step or a test group failed. Budget: under 8 minutes on an H200 with 16 cores.
# Usage: scripts/gpu_check.sh   (AMP_GPU_CHECK_BUILD_ONLY=1: stop after the build)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$SECONDS
JOBS=$(nproc 2>/dev/null || echo 16)
BUILD=$ROOT/build-gpu
PREFIX=$BUILD/prefix  # inside the (git-ignored) build folder: it must never travel
LOGS=$(mktemp -d)
# The report goes straight to $OUT when it is set, line by line: a run killed at its time limit
# still leaves everything it printed there (the logs follow as one archive at the end).
if [ -n "${OUT:-}" ] && mkdir -p "$OUT"; then REPORT=$OUT/gpu_check.txt; else REPORT=$LOGS/gpu_check.txt; fi
: > "$REPORT"
failures=0

say() { echo "$@" | tee -a "$REPORT"; }
pass() { say "PASS: $*"; }
fail() { say "FAIL: $*"; failures=$((failures + 1)); }
elapsed() { echo "$((SECONDS - START))s"; }
# True while less than $1 seconds have gone since $2 (default: the start): later stages are
# skipped (and said so) rather than run past the budget when something earlier hung until its
# timeout. The build's time varies; the tests are skipped only for time their own phase used.
within() { [ $((SECONDS - ${2:-$START})) -lt "$1" ]; }
finish() {
  say ""
  say "gpu_check: $failures failure(s), $(elapsed)"
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" && { [ "$REPORT" = "$OUT/gpu_check.txt" ] || cp "$REPORT" "$OUT/gpu_check.txt"; }
    (cd "$LOGS" && tar czf "$OUT/gpu_check_logs.tgz" --exclude gpu_check.txt . 2>/dev/null)
  fi
  exit $((failures > 0))
}
# Last lines of a log, indented, into the report.
show_tail() { tail -n "${2:-25}" "$1" | sed 's/^/    /' | tee -a "$REPORT"; }

say "== amp_ddp GPU check ($(date -u +%Y-%m-%dT%H:%M:%SZ))"

# ---------------------------------------------------------------- toolchain
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
ORIG_PATH=$PATH
export PATH=/usr/local/cuda/bin:$PATH
if command -v nvidia-smi >/dev/null; then
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
fi
command -v nvcc >/dev/null && say "nvcc: $(nvcc --version | tail -2 | head -1)" || { fail "no nvcc (CUDA toolkit) found"; finish; }
CXX_BIN=$(command -v g++ || command -v c++ || true)
[ -n "$CXX_BIN" ] || { fail "no host C++ compiler (g++) found"; finish; }
say "host compiler: $("$CXX_BIN" --version | head -1)"
# A cmake that runs: the image's (on PATH, or PyTorch's venv's pip package, which is static), else
# the one from .gpu_debs/ below (that one needs libarchive13 and libcurl4 from the image).
cmake_runs() { [ -n "$1" ] && "$1" --version >/dev/null 2>&1; }
SYS_CMAKE=$(command -v cmake || true)
if ! cmake_runs "$SYS_CMAKE"; then
  SYS_CMAKE=$(python3 -c "import cmake, os; print(os.path.join(cmake.CMAKE_BIN_DIR, 'cmake'))" 2>/dev/null || true)
  cmake_runs "$SYS_CMAKE" || SYS_CMAKE=
fi

# ---------------------------------------------------------------- Debian packages -> private prefix
if compgen -G ".gpu_debs/*.deb" >/dev/null; then
  rm -rf "$PREFIX" && mkdir -p "$PREFIX"  # fresh: stale files of other package versions would mix in
  for deb in .gpu_debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$PREFIX" || fail "unpacking $deb"
    else  # no dpkg: a .deb is an ar archive holding data.tar.*
      (tmp=$(mktemp -d) && cd "$tmp" && ar x "$ROOT/$deb" && tar xf data.tar.* -C "$PREFIX" && rm -rf "$tmp") ||
        fail "unpacking $deb"
    fi
  done
  # Absolute symlinks (libz.so -> /lib/...) point at the host; repoint those the prefix can serve.
  find "$PREFIX" -type l -lname '/*' | while read -r link; do
    target=$(readlink "$link")
    if [ -e "$PREFIX$target" ]; then ln -sfn "$PREFIX$target" "$link"; fi
  done
  export PATH=$PATH:$PREFIX/usr/bin  # after the system's tools: the image's cmake wins
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export CMAKE_PREFIX_PATH=$PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export OPAL_PREFIX=$PREFIX/usr  # Open MPI finds its plugins, help files and orted there
  say "prefix: $(ls .gpu_debs/*.deb | wc -l) packages unpacked into build-gpu/prefix/ ($(elapsed))"
else
  say "prefix: no .gpu_debs/ (run scripts/gpu_prepare.sh on the CPU machine); using the system's packages"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_btl_base_warn_component_unused=0 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}

CMAKE=${SYS_CMAKE:-$(command -v cmake || true)}
if ! cmake_runs "$CMAKE"; then
  fail "no cmake that runs (neither the image's nor .gpu_debs/'s${CMAKE:+: $CMAKE})"
  [ -n "$CMAKE" ] && ldd "$CMAKE" 2>&1 | grep "not found" | tee -a "$REPORT"
  finish
fi
say "cmake: $("$CMAKE" --version | head -1) ($CMAKE)"

# ---------------------------------------------------------------- NCCL: the toolkit's, else PyTorch's wheel
NCCL_ARGS=()
if [ -f /usr/local/cuda/include/nccl.h ] || [ -f /usr/include/nccl.h ]; then
  say "NCCL: system"
else
  # nvidia-nccl-cu12/-cu13 install nvidia/nccl/{include,lib} (cu13 keeps NCCL there while the
  # other CUDA 13 wheels moved to nvidia/cu13/); nvidia is a namespace package (no __file__).
  nccl_dir=$(python3 - 2>/dev/null <<'PY' || true
import glob, os
import nvidia
for root in list(nvidia.__path__):
    for d in [os.path.join(root, "nccl")] + sorted(glob.glob(os.path.join(root, "cu*"))):
        if os.path.isfile(os.path.join(d, "include", "nccl.h")) and glob.glob(os.path.join(d, "lib", "libnccl.so*")):
            print(d)
            raise SystemExit(0)
PY
)
  nccl_lib=$(ls "$nccl_dir"/lib/libnccl.so* 2>/dev/null | head -1)
  if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ] && [ -n "$nccl_lib" ]; then
    NCCL_ARGS=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$nccl_lib")
    say "NCCL: $nccl_lib (PyTorch's wheel)"
  else
    say "NCCL: not found (the NCCL communicator is not built)"
  fi
fi
MPI_ARGS=()
if [ -x "$PREFIX/usr/bin/mpicxx.openmpi" ]; then
  MPI_ARGS=(-DMPI_C_COMPILER="$PREFIX/usr/bin/mpicc.openmpi" -DMPI_CXX_COMPILER="$PREFIX/usr/bin/mpicxx.openmpi"
            -DMPIEXEC_EXECUTABLE="$PREFIX/usr/bin/mpirun.openmpi")
fi

# ---------------------------------------------------------------- configure and build
POLICY_ARGS=()  # CMake 4 refuses package files that ask for policies older than 3.5
[ "$("$CMAKE" --version | head -1 | sed -E 's/[^0-9]*([0-9]+).*/\1/')" -ge 4 ] 2>/dev/null &&
  POLICY_ARGS=(-DCMAKE_POLICY_VERSION_MINIMUM=3.5)
if "$CMAKE" -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DAMP_CUDA=ON -DAMP_NCCL=AUTO -DAMP_GPU_TESTS=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CXX_COMPILER="$CXX_BIN" \
     "${NCCL_ARGS[@]}" "${MPI_ARGS[@]}" "${POLICY_ARGS[@]}" > "$LOGS/configure.log" 2>&1; then
  pass "configure ($(grep -E "CUDA  |NCCL  " "$LOGS/configure.log" | sed 's/^-- *//' | tr -s ' ' | paste -sd';'))"
else
  fail "configure"; show_tail "$LOGS/configure.log" 40; finish
fi
TARGETS=(amp_ddp amp_gpu_tests bench_gpu_step bench_gpu_gemm)
if "$CMAKE" --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" > "$LOGS/build.log" 2>&1; then
  warnings=$(grep -c "warning" "$LOGS/build.log" || true)
  pass "build ${TARGETS[*]} ($warnings warning lines, $(elapsed))"
else
  fail "build"; grep -E "error|Error" "$LOGS/build.log" | head -30 | tee -a "$REPORT"; show_tail "$LOGS/build.log" 20; finish
fi
say "$("$BUILD/amp_ddp" --version 2>&1 | head -1)"
[ "${AMP_GPU_CHECK_BUILD_ONLY:-0}" = 1 ] && finish

# ---------------------------------------------------------------- GPU tests, one group per process
TESTS=$BUILD/tests/gpu/amp_gpu_tests
TESTS_START=$SECONDS
for group in cast gemm ops loss amp optim graph trainer nccl; do
  if ! within 240 "$TESTS_START"; then
    fail "tests [$group] not run: the time budget is spent ($(elapsed))"; continue
  fi
  names=$("$TESTS" --list-test-names-only "[.cuda][$group]" 2>/dev/null || true)
  if [ -z "$names" ]; then
    say "SKIP: tests [$group] (not built)"; continue
  fi
  log=$LOGS/test_$group.log
  # Every group takes seconds; a hang (a collective, a sync) must not eat the whole budget.
  if timeout 90 "$TESTS" "[.cuda][$group]" > "$log" 2>&1; then
    pass "tests [$group]: $(grep -E "All tests passed" "$log" | tail -1)"
  else
    fail "tests [$group] (exit $?)"; show_tail "$log" 40
  fi
done
say "tests done ($(elapsed))"

# ---------------------------------------------------------------- amp_ddp end to end on the GPU
E2E=$LOGS/e2e
if ! within 480; then
  fail "amp_ddp on cuda not run: the time budget is spent ($(elapsed))"
elif timeout 90 "$BUILD/amp_ddp" configs/seed_dynamic.yaml --set run.device=cuda --set run.steps=2000 \
     --set model.hidden='[1024, 1024]' --set data.batch_size=128 --set data.synthetic.features=784 \
     --set data.synthetic.outputs=10 --set data.synthetic.train_samples=16384 --set optimizer.type=adamw \
     --set optimizer.lr=1e-4 --set precision.loss_scale.init_scale=1024 --set run.progress=lines \
     --set run.log_interval=500 --set checkpoint.final=false --set run.out_dir="$E2E" > "$LOGS/amp_ddp.log" 2>&1; then
  pass "amp_ddp on cuda: $(tail -1 "$LOGS/amp_ddp.log")"
else
  fail "amp_ddp on cuda"; show_tail "$LOGS/amp_ddp.log" 20
fi

# ---------------------------------------------------------------- benchmarks (not tests)
BENCH=$LOGS/bench.jsonl
: > "$BENCH"
python3 -c "import json; [print(json.dumps({'bench': 'amp_ddp', 'samples_per_second': s['samples_per_second'], 'skipped': s['skipped_steps']})) for s in [json.load(open('$E2E/summary.json'))]]" >> "$BENCH" 2>/dev/null
MODELS=("784,1024,1024,10:128" "784,4096,4096,4096,4096,10:4096")
for spec in "${MODELS[@]}"; do
  dims=${spec%%:*}; batch=${spec##*:}
  for dt in f16 bf16; do
    if ! within 480; then say "note: benchmark $dims $dt skipped (time budget, $(elapsed))"; continue; fi
    timeout 60 "$BUILD/bench/gpu/bench_gpu_step" --dims "$dims" --batch "$batch" --dtype "$dt" >> "$BENCH" 2>> "$LOGS/bench.err" ||
      fail "bench_gpu_step $dims batch $batch $dt"
    timeout 60 "$BUILD/bench/gpu/bench_gpu_gemm" --dims "$dims" --batch "$batch" --dtype "$dt" >> "$BENCH" 2>> "$LOGS/bench.err" ||
      fail "bench_gpu_gemm $dims batch $batch $dt"
    LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH PATH=$ORIG_PATH timeout 90 python3 bench/gpu/torch_step.py --dims "$dims" \
      --batch "$batch" --dtype "$dt" --gemm >> "$BENCH" 2>> "$LOGS/bench.err" || say "note: PyTorch peer failed ($dims $dt)"
  done
done
say "benchmarks done ($(elapsed))"

# ---------------------------------------------------------------- the table
if ! command -v python3 >/dev/null; then
  say "PyTorch not available (no python3); raw results:"; cat "$BENCH" | tee -a "$REPORT"; finish
fi
python3 - "$BENCH" <<'PY' | tee -a "$REPORT"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
torch_err = [r for r in rows if r.get("bench") == "torch" and "error" in r]
if torch_err:
    print(torch_err[0]["error"])
steps = {(r["model"], r["dtype"]): r for r in rows if r.get("bench") == "amp_step"}
peers = {(r["model"], r["dtype"]): r for r in rows if r.get("bench") == "torch_step"}
print()
print("| model | batch | dtype | amp_ddp step ms (graph) | PyTorch autocast step ms | speed-up | GEMM TFLOP/s (step GEMMs alone) | AMP bookkeeping ms | share of step | optimizer ms |")
print("|---|---|---|---|---|---|---|---|---|---|")
for key, r in steps.items():
    p = peers.get(key)
    peer = f"{p['step_ms']:.3f}" if p else "n/a"
    speed = f"{p['step_ms'] / r['step_ms']:.2f}x" if p else "n/a"
    print(f"| {r['model']} | {r['batch']} | {r['dtype']} | {r['step_ms']:.3f} | {peer} | {speed} | {r['gemm_tflops']:.1f} "
          f"| {r['amp_ms']:.4f} | {100 * r['amp_share']:.2f}% | {r['optimizer_ms']:.4f} |")
gem = [r for r in rows if r.get("bench") == "gemm"]
tg = {(r["layer"], r["op"], r["dtype"], r["m"], r["n"], r["k"]): r for r in rows if r.get("bench") == "torch_gemm"}
if gem:
    print()
    print("| GEMM (m x n x k) | op | dtype | ours TFLOP/s | cuBLAS GemmEx TFLOP/s | torch.matmul TFLOP/s | ours / cuBLAS |")
    print("|---|---|---|---|---|---|---|")
    for r in gem:
        t = tg.get((r["layer"], r["op"], r["dtype"], r["m"], r["n"], r["k"]))
        tt = f"{t['torch_tflops']:.1f}" if t else "n/a"
        print(f"| {r['m']} x {r['n']} x {r['k']} | L{r['layer']} {r['op']} | {r['dtype']} | {r['ours_tflops']:.1f} "
              f"| {r['cublas_tflops']:.1f} | {tt} | {r['ours_tflops'] / max(r['cublas_tflops'], 1e-9):.2f} |")
for r in rows:
    if r.get("bench") == "amp_ddp":
        print(f"\namp_ddp end to end (784-1024-1024-10 MLP, synthetic MSE data, fp16, batch 128, CUDA graph): "
              f"{r['samples_per_second']:.0f} samples/s, {r['skipped']} skipped steps")
PY
[ -s "$LOGS/bench.err" ] && { say "benchmark stderr (last lines):"; show_tail "$LOGS/bench.err" 10; }
finish
