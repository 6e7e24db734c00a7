#!/usr/bin/env bash
# Runs ON the GPU machine (x86-64, CUDA toolkit in /usr/local/cuda, NCCL, python3 with PyTorch, no
# network), from the repository root with .gpu_debs/ carried along (scripts/gpu_prepare.sh makes it
# here): unpacks those Debian packages into build-gpu/prefix/ (never into /), builds the CUDA/NCCL
# configuration (sm_90), runs the GPU tests group by group, trains on one GPU rank end to end, then
# benchmarks the step against PyTorch autocast + GradScaler on the same model and batch, measured in
# the same run, and prints a summary. Exits non-zero if a build step or a test group failed.
#
# Time: everything runs under one budget (AMP_GPU_CHECK_BUDGET seconds, default 560). Every command
# runs under `timeout -k` with the smaller of its own cap and the time left, so a hung command (a
# stuck collective, a step that never returns: SIGTERM only asks the trainer to stop between steps)
# is killed GRACE seconds after its TERM, and the script ends within the budget in the worst case.
# Run it with the device tool's timeout_s at least 30 s above the budget.
# Output: with OUT set, the report ($OUT/gpu_check.txt) is written line by line and the logs
# archive ($OUT/gpu_check_logs.tgz) is rewritten after every command, so a run killed from outside
# loses nothing that had finished. The device tool brings back at most 8 files: the logs travel as
# one archive, replaced atomically, not one file each.
# Usage: scripts/gpu_check.sh   (AMP_GPU_CHECK_BUILD_ONLY=1: stop after the build)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
START=$SECONDS
BUDGET=${AMP_GPU_CHECK_BUDGET:-560}
GRACE=5      # seconds between a command's TERM and its KILL
RESERVE=15   # kept for the summary and the last archive
JOBS=$(nproc 2>/dev/null || echo 16)
BUILD=$ROOT/build-gpu
PREFIX=$BUILD/prefix  # inside the (git-ignored) build folder: it must never travel
LOGS=$(mktemp -d)
if [ -n "${OUT:-}" ] && mkdir -p "$OUT"; then REPORT=$OUT/gpu_check.txt; else REPORT=$LOGS/gpu_check.txt; fi
: > "$REPORT"
failures=0
SUMMARY=()  # one line per stage, printed at the end

say() { echo "$@" | tee -a "$REPORT"; }
pass() { say "PASS: $*"; SUMMARY+=("PASS  $*"); }
fail() { say "FAIL: $*"; SUMMARY+=("FAIL  $*"); failures=$((failures + 1)); }
note() { say "note: $*"; SUMMARY+=("note  $*"); }
elapsed() { echo "$((SECONDS - START))s"; }
# Show the last lines of a log, indented, in the report.
show_tail() { tail -n "${2:-25}" "$1" | sed 's/^/    /' | tee -a "$REPORT"; }
# The logs so far as one archive in $OUT (written aside, then renamed: never half an archive).
archive_logs() {
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/gpu_check_logs.tgz.part" -C "$LOGS" --exclude gpu_check.txt . 2>/dev/null &&
    mv -f "$OUT/gpu_check_logs.tgz.part" "$OUT/gpu_check_logs.tgz"
}
# Seconds a command may run now: the smaller of its cap ($1) and what the budget leaves after the
# KILL grace and the reserve (an optional phase end, $2 in seconds since START, bounds it too).
limit_for() {
  local end=$((START + BUDGET - RESERVE - GRACE)) lim=$1
  [ -n "${2:-}" ] && [ $((START + $2)) -lt "$end" ] && end=$((START + $2))
  [ $((end - SECONDS)) -lt "$lim" ] && lim=$((end - SECONDS))
  echo "$lim"
}
# bounded CAP [PHASE_END] -- cmd...: cmd under timeout -k with limit_for's limit; 125 (and nothing
# run) when fewer than 5 seconds are left. 124/137: stopped by the TERM / the KILL.
bounded() {
  local cap=$1 phase=""; shift
  [ "$1" != "--" ] && { phase=$1; shift; }
  shift
  local lim
  lim=$(limit_for "$cap" "$phase")
  [ "$lim" -ge 5 ] || return 125
  timeout -k "$GRACE" "$lim" "$@"
}
# run_logged LOG CAP [PHASE_END] -- cmd...: bounded, stdout and stderr into LOG (with a line saying
# why it ended early), then the archive is refreshed.
run_logged() {
  local log=$1; shift
  bounded "$@" > "$log" 2>&1
  local rc=$?
  case $rc in
    124|137) echo "gpu_check: stopped by its time limit (exit $rc) at $(elapsed)" >> "$log" ;;
    125) echo "gpu_check: not run, the time budget was spent ($(elapsed))" >> "$log" ;;
  esac
  archive_logs
  return $rc
}
why() { case $1 in 124|137) echo "timed out";; 125) echo "not run: time budget spent";; *) echo "exit $1";; esac; }
finish() {
  say ""
  say "== summary ($(elapsed) of a ${BUDGET}s budget)"
  for line in "${SUMMARY[@]}"; do say "  $line"; done
  say "gpu_check: $failures failure(s), $(elapsed)"
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" && { [ "$REPORT" = "$OUT/gpu_check.txt" ] || cp "$REPORT" "$OUT/gpu_check.txt"; }
    archive_logs
  fi
  exit $((failures > 0))
}

say "== amp_ddp GPU check ($(date -u +%Y-%m-%dT%H:%M:%SZ))"

# ---------------------------------------------------------------- toolchain
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
ORIG_PATH=$PATH
export PATH=/usr/local/cuda/bin:$PATH
if command -v nvidia-smi >/dev/null; then  # a wedged driver can hang nvidia-smi too
  say "GPU: $(bounded 20 -- nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
fi
command -v nvcc >/dev/null && say "nvcc: $(bounded 20 -- nvcc --version | tail -2 | head -1)" ||
  { fail "no nvcc (CUDA toolkit) found"; finish; }
CXX_BIN=$(command -v g++ || command -v c++ || true)
[ -n "$CXX_BIN" ] || { fail "no host C++ compiler (g++) found"; finish; }
say "host compiler: $(bounded 20 -- "$CXX_BIN" --version | head -1)"
# A cmake that runs: the image's (on PATH, or PyTorch's venv's pip package, which is static), else
# the one from .gpu_debs/ below (that one needs libarchive13 and libcurl4 from the image).
cmake_runs() { [ -n "$1" ] && bounded 20 -- "$1" --version >/dev/null 2>&1; }
SYS_CMAKE=$(command -v cmake || true)
if ! cmake_runs "$SYS_CMAKE"; then
  SYS_CMAKE=$(bounded 30 -- python3 -c "import cmake, os; print(os.path.join(cmake.CMAKE_BIN_DIR, 'cmake'))" 2>/dev/null || true)
  cmake_runs "$SYS_CMAKE" || SYS_CMAKE=
fi

# ---------------------------------------------------------------- Debian packages -> private prefix
if compgen -G ".gpu_debs/*.deb" >/dev/null; then
  rm -rf "$PREFIX" && mkdir -p "$PREFIX"  # fresh: stale files of other package versions would mix in
  for deb in .gpu_debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      bounded 30 -- dpkg-deb -x "$deb" "$PREFIX" || fail "unpacking $deb"
    else  # no dpkg: a .deb is an ar archive holding data.tar.*
      bounded 30 -- bash -c 'tmp=$(mktemp -d) && cd "$tmp" && ar x "$1" && tar xf data.tar.* -C "$2" && rm -rf "$tmp"' \
        unpack "$ROOT/$deb" "$PREFIX" || fail "unpacking $deb"
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
say "cmake: $(bounded 20 -- "$CMAKE" --version | head -1) ($CMAKE)"

# ---------------------------------------------------------------- NCCL: the toolkit's, else PyTorch's wheel
NCCL_ARGS=()
if [ -f /usr/local/cuda/include/nccl.h ] || [ -f /usr/include/nccl.h ]; then
  say "NCCL: system"
else
  # nvidia-nccl-cu12/-cu13 install nvidia/nccl/{include,lib} (cu13 keeps NCCL there while the
  # other CUDA 13 wheels moved to nvidia/cu13/); nvidia is a namespace package (no __file__).
  nccl_dir=$(bounded 30 -- python3 - 2>/dev/null <<'PY' || true
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
[ "$(bounded 20 -- "$CMAKE" --version | head -1 | sed -E 's/[^0-9]*([0-9]+).*/\1/')" -ge 4 ] 2>/dev/null &&
  POLICY_ARGS=(-DCMAKE_POLICY_VERSION_MINIMUM=3.5)
if run_logged "$LOGS/configure.log" 120 -- "$CMAKE" -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DAMP_CUDA=ON \
     -DAMP_NCCL=AUTO -DAMP_GPU_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
     -DCMAKE_CXX_COMPILER="$CXX_BIN" "${NCCL_ARGS[@]}" "${MPI_ARGS[@]}" "${POLICY_ARGS[@]}"; then
  pass "configure ($(grep -E "CUDA  |NCCL  " "$LOGS/configure.log" | sed 's/^-- *//' | tr -s ' ' | paste -sd';'))"
else
  rc=$?; fail "configure ($(why $rc))"; show_tail "$LOGS/configure.log" 40; finish
fi
TARGETS=(amp_ddp amp_gpu_tests bench_gpu_step bench_gpu_gemm)
if run_logged "$LOGS/build.log" 330 -- "$CMAKE" --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"; then
  warnings=$(grep -c "warning" "$LOGS/build.log" || true)
  pass "build ${TARGETS[*]} ($warnings warning lines, $(elapsed))"
else
  rc=$?; fail "build ($(why $rc))"; grep -E "error|Error" "$LOGS/build.log" | head -30 | tee -a "$REPORT"
  show_tail "$LOGS/build.log" 20; finish
fi
say "$(bounded 20 -- "$BUILD/amp_ddp" --version 2>&1 | head -1)"
[ "${AMP_GPU_CHECK_BUILD_ONLY:-0}" = 1 ] && finish

# ---------------------------------------------------------------- GPU tests, one group per process
# The tests may use the budget up to 240 s before its end: the end-to-end runs and the benchmarks
# keep that much.
TESTS=$BUILD/tests/gpu/amp_gpu_tests
TESTS_END=$((BUDGET - 240))
for group in cast gemm ops loss amp optim graph trainer nccl; do
  names=$(bounded 20 "$TESTS_END" -- "$TESTS" --list-test-names-only "[.cuda][$group]" 2>/dev/null || true)
  if [ -z "$names" ]; then
    if [ "$(limit_for 20 "$TESTS_END")" -lt 5 ]; then fail "tests [$group] (not run: time budget spent)"
    else say "SKIP: tests [$group] (not built)"; fi
    continue
  fi
  log=$LOGS/test_$group.log
  # Every group takes seconds; a hang (a collective, a sync) is killed at its cap.
  if run_logged "$log" 120 "$TESTS_END" -- "$TESTS" "[.cuda][$group]" --durations yes; then
    pass "tests [$group]: $(grep -E "All tests passed" "$log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')"
  else
    rc=$?; fail "tests [$group] ($(why $rc))"; show_tail "$log" 40
  fi
done
say "tests done ($(elapsed))"

# ---------------------------------------------------------------- amp_ddp end to end on one GPU rank
# One GPU: one rank (NCCL refuses two ranks on one device), so the NCCL path of the trainer runs only
# in the [nccl] tests above, with one rank. The run captures its step into a CUDA graph at step 3.
E2E=$LOGS/e2e
if run_logged "$LOGS/amp_ddp.log" 60 -- "$BUILD/amp_ddp" configs/seed_dynamic.yaml --set run.device=cuda \
     --set run.steps=2000 --set model.hidden='[1024, 1024]' --set data.batch_size=128 \
     --set data.synthetic.features=784 --set data.synthetic.outputs=10 --set data.synthetic.train_samples=16384 \
     --set optimizer.type=adamw --set optimizer.lr=1e-4 --set precision.loss_scale.init_scale=1024 \
     --set run.progress=lines --set run.log_interval=500 --set checkpoint.final=false --set run.out_dir="$E2E"; then
  pass "amp_ddp on cuda: $(tail -1 "$LOGS/amp_ddp.log")"
else
  rc=$?; fail "amp_ddp on cuda ($(why $rc))"; show_tail "$LOGS/amp_ddp.log" 20
fi

# The GPT (issue 11) on one GPU: every transformer op of the CUDA backend inside a captured step,
# FP16 with dynamic scaling, on text written here (no package needed), ending with a sample.
GPT_TEXT=$LOGS/gpt_text.txt
python3 -c "
w = 'the quick brown fox jumps over a lazy dog while seven wizards judge boxing near old towers'.split()
print('\\n'.join(' '.join(w[(i * 7 + k * 3) % len(w)] for k in range(3 + i % 9)) + '.' for i in range(20000)))" > "$GPT_TEXT"
if run_logged "$LOGS/amp_ddp_gpt.log" 90 -- "$BUILD/amp_ddp" configs/gpt_fortunes_fp16.yaml --set run.device=cuda \
     --set "data.text_files=[\"$GPT_TEXT\"]" --set run.steps=300 --set run.eval_interval=300 --set run.sample_interval=0 \
     --set run.progress=lines --set run.log_interval=100 --set checkpoint.final=false --set run.out_dir="$LOGS/gpt"; then
  pass "gpt on cuda: $(tail -1 "$LOGS/amp_ddp_gpt.log")"
else
  rc=$?; fail "gpt on cuda ($(why $rc))"; show_tail "$LOGS/amp_ddp_gpt.log" 30
fi

# Gradient accumulation on the device: FP32, 8 sequences x 2 micro-batches against 16 in one, same
# samples per step: every logged loss within 1e-4 relative (cuBLAS sums in other orders per shape).
GA_OK=1
for ga in "16 1" "8 2"; do
  read -r bs acc <<< "$ga"
  run_logged "$LOGS/amp_ddp_ga_$acc.log" 60 -- "$BUILD/amp_ddp" configs/gpt_fortunes_fp32.yaml --set run.device=cuda \
    --set "data.text_files=[\"$GPT_TEXT\"]" --set run.steps=20 --set run.eval_interval=0 --set run.sample_interval=0 \
    --set sample.tokens=0 --set run.log_interval=5 --set run.progress=off --set checkpoint.final=false \
    --set data.batch_size=$bs --set data.grad_accum_steps=$acc --set run.out_dir="$LOGS/ga_$acc" || GA_OK=0
done
if [ $GA_OK = 1 ] && bounded 20 -- python3 -c "
import json, sys
l = [[m['loss'] for m in map(json.loads, open(f'$LOGS/ga_{a}/metrics.jsonl')) if 'loss' in m] for a in (1, 2)]
w = max(abs(x - y) / abs(x) for x, y in zip(*l)) if len(l[0]) == len(l[1]) == 4 else 1.0
print(f'max relative loss difference {w:.3g}'); sys.exit(0 if w < 1e-4 else 1)" > "$LOGS/ga_compare.txt" 2>&1; then
  pass "gradient accumulation on cuda: 8 x 2 micro-batches == 16, $(cat "$LOGS/ga_compare.txt")"
else
  fail "gradient accumulation on cuda: $(cat "$LOGS/ga_compare.txt" 2>/dev/null)"; show_tail "$LOGS/amp_ddp_ga_2.log" 20
fi

# ---------------------------------------------------------------- benchmarks (not tests)
BENCH=$LOGS/bench.jsonl
: > "$BENCH"
bounded 20 -- python3 -c "import json; [print(json.dumps({'bench': 'amp_ddp', 'samples_per_second': s['samples_per_second'], 'skipped': s['skipped_steps']})) for s in [json.load(open('$E2E/summary.json'))]]" >> "$BENCH" 2>/dev/null
# GPT-2 124M (configs/gpt2_124m.yaml: bf16, 16 x 1024 tokens per step) on random tokens of an
# llm.c shard written here (no corpus on this machine): amp_ddp's steady step time and model FLOP
# utilization (scripts/scaling_model.py --mfu: every GEMM's FLOPs, attention in full T x T, against
# 989 TFLOP/s), and the PyTorch peer (autocast, attention written out and fused) in the same run.
GPT2_SHARD=$LOGS/gpt2_random_tokens.bin
bounded 30 -- python3 - "$GPT2_SHARD" <<'PY'
import array, random, sys
n = 1 << 21
header = array.array("i", [0] * 256)
header[0], header[1], header[2] = 20240520, 1, n
rng = random.Random(0)
tokens = array.array("H", (rng.randrange(50257) for _ in range(n)))
with open(sys.argv[1], "wb") as f:
    header.tofile(f)
    tokens.tofile(f)
PY
if run_logged "$LOGS/amp_ddp_gpt2.log" 150 -- "$BUILD/amp_ddp" configs/gpt2_124m.yaml \
     --set "data.train_tokens=[\"$GPT2_SHARD\"]" --set "data.eval_tokens=[]" --set run.steps=30 \
     --set run.eval_interval=0 --set run.sample_interval=0 --set sample.tokens=0 --set run.log_interval=10 \
     --set run.progress=lines --set checkpoint.final=false --set run.out_dir="$LOGS/gpt2"; then
  bounded 20 -- python3 scripts/scaling_model.py --mfu "$LOGS/gpt2/summary.json" > "$LOGS/gpt2_mfu.txt" 2>&1
  pass "gpt-2 124m on cuda: $(head -1 "$LOGS/gpt2_mfu.txt")"
  grep -h '^{' "$LOGS/gpt2_mfu.txt" >> "$BENCH"
else
  rc=$?; fail "gpt-2 124m on cuda ($(why $rc))"; show_tail "$LOGS/amp_ddp_gpt2.log" 30
fi
if run_logged "$LOGS/torch_gpt2.log" 120 -- env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PATH="$ORIG_PATH" \
     python3 bench/gpu/torch_gpt_step.py --dtype bf16; then :
else rc=$?; note "PyTorch GPT-2 peer failed ($(why $rc))"; fi
grep -h '^{' "$LOGS/torch_gpt2.log" >> "$BENCH"
MODELS=("784,1024,1024,10:128" "784,4096,4096,4096,4096,10:4096")
n=0
for spec in "${MODELS[@]}"; do
  dims=${spec%%:*}; batch=${spec##*:}
  for dt in f16 bf16; do
    n=$((n + 1))
    log=$LOGS/bench_$n
    for prog in bench_gpu_step bench_gpu_gemm; do
      if run_logged "$log.$prog" 60 -- "$BUILD/bench/gpu/$prog" --dims "$dims" --batch "$batch" --dtype "$dt"; then :
      else
        rc=$?
        if [ $rc = 125 ]; then note "$prog $dims $dt not run (time budget)"; else fail "$prog $dims batch $batch $dt ($(why $rc))"; fi
      fi
      grep -h '^{' "$log.$prog" >> "$BENCH"
    done
    # PyTorch with the image's own libraries, not the prefix's.
    if run_logged "$log.torch" 90 -- env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PATH="$ORIG_PATH" \
         python3 bench/gpu/torch_step.py --dims "$dims" --batch "$batch" --dtype "$dt" --gemm; then :
    else rc=$?; note "PyTorch peer failed ($dims $dt: $(why $rc))"; fi
    grep -h '^{' "$log.torch" >> "$BENCH"
  done
done
archive_logs
say "benchmarks done ($(elapsed))"

# ---------------------------------------------------------------- the table
if ! command -v python3 >/dev/null; then
  say "no python3; raw results:"; cat "$BENCH" | tee -a "$REPORT"; finish
fi
# The table runs on the time kept in reserve.
timeout -k 2 10 python3 - "$BENCH" <<'PY' | tee -a "$REPORT"
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
mfu = [r for r in rows if r.get("bench") == "amp_mfu"]
tg2 = [r for r in rows if r.get("bench") == "torch_gpt_step"]
if mfu or tg2:
    print()
    print("| GPT-2 124M, bf16, 16 x 1024 tokens | step ms | tokens/s | TFLOP/s | MFU (of 989) | amp_ddp speed-up |")
    print("|---|---|---|---|---|---|")
    ours = mfu[0] if mfu else None
    if ours:
        tok = ours["samples_per_rank_step"] * 1024
        print(f"| amp_ddp | {ours['step_ms']:.1f} | {tok / (ours['step_ms'] * 1e-3):,.0f} | {ours['tflops']:.1f} "
              f"| {ours['mfu']:.1%} | |")
    for r in tg2:
        if "error" in r:
            print(f"| PyTorch ({r['attention']} attention) | {r['error'][:80]} | | | | |")
            continue
        flops = ours["tflops"] * ours["step_ms"] / r["step_ms"] if ours else None  # same model FLOPs
        cells = ["-", "-", "-"] if not ours else [f"{flops:.1f}", f"{flops / 989:.1%}", f"{r['step_ms'] / ours['step_ms']:.2f}x"]
        print(f"| PyTorch {r['torch']} autocast, {r['attention']} attention, {r['optimizer']} AdamW | {r['step_ms']:.1f} "
              f"| {r['tokens_per_s']:,.0f} | " + " | ".join(cells) + " |")
for r in rows:
    if r.get("bench") == "amp_ddp":
        print(f"\namp_ddp end to end (784-1024-1024-10 MLP, synthetic MSE data, fp16, batch 128, CUDA graph): "
              f"{r['samples_per_second']:.0f} samples/s, {r['skipped']} skipped steps")
PY
finish
