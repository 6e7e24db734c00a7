#!/usr/bin/env bash
# The GPU check: one command for one device call on a GPU machine (x86-64, CUDA toolkit, NCCL,
# python3 with PyTorch, no network), run from the repository root with .gpu_debs/ carried along
# (scripts/gpu_prepare.sh makes it here):
#
#     device run: command "scripts/gpu_check.sh", carry [".gpu_debs"], timeout_s 590
#
# Phases, in order of value, each with its own deadline (seconds after the start, printed as the
# plan at the top of the report):
#   1. build      unpack .gpu_debs/ into build-gpu/prefix/ (never into /), configure and build the
#                 CUDA/NCCL configuration (sm_90): amp_ddp, amp_gpu_tests and the GPU benchmarks;
#                 with .gpu_prebuilt/ carried too (scripts/gpu_prepare.sh --prebuilt builds them
#                 here), those binaries instead: no compiler or cmake is needed, the shared
#                 libraries they need and the loader cannot find are looked up where CUDA toolkits
#                 and PyTorch's wheels keep them, and the check stops if any is still missing
#   2. tests      the device tests (tests/gpu/, hidden tag [.cuda]), one process per group
#   3. headline   GPT-2 124M (configs/gpt2_124m.yaml) on one GPU: steady step time and MFU, next to
#                 the PyTorch peer in the same run
#   4. e2e        end-to-end training on one GPU rank: the MLP, the small GPT, gradient accumulation
#   5. bench      in what is left: where the GPT-2 step's time goes (every op timed), where fused
#                 attention overtakes the explicit path, the MLP step and its GEMMs against PyTorch
#                 autocast and cuBLAS
# then the tables and a summary (one PASS/FAIL/note line per stage). Exit code 1 if a stage failed.
#
# Time: everything runs under one budget (AMP_GPU_CHECK_BUDGET seconds, default 560). Every command
# runs under `timeout -k` with the smallest of its own cap, its phase's deadline and what the budget
# leaves after the reserve, so a hung command (a stuck collective, a step that never returns) is
# killed GRACE seconds after its TERM, the later phases still run, and the script ends within the
# budget even if every command hangs. Give the device call a timeout_s 30 s above the budget.
#
# Output: with OUT set, $OUT/gpu_check.txt (the report, line by line), $OUT/gpu_check_summary.txt
# (the summary so far, rewritten after every phase) and $OUT/gpu_check_logs.tgz (every command's
# log, the run folders and the benchmarks' JSON lines, rewritten after every command), each written
# aside and renamed: a run killed from outside still brings back everything that had finished.
#
# Usage: scripts/gpu_check.sh [--dry-run]
#   AMP_GPU_CHECK_UNTIL=PHASE    stop after that phase (build, tests, headline, e2e; default: bench,
#                                all of them): a rerun of what failed, or a dry run that checks less
#   --dry-run                    no GPU and no CUDA needed: walks every phase with the CPU standing
#                                in for the device (the Release build in build/, the device tests'
#                                CPU twin amp_device_logic_tests with one case per group, run.device
#                                cpu, the training runs shrunk to one thread, the caps tripled) to
#                                check the phases, deadlines and report format
#                                (tests/e2e/test_gpu_check.py runs it in CI)
#   AMP_GPU_CHECK_FAKE=hang:GROUP|nolist   dry run only: a test group that hangs, or a device test
#                                binary that cannot start (the script's own tests)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
START=$SECONDS
BUDGET=${AMP_GPU_CHECK_BUDGET:-560}
GRACE=5      # seconds between a command's TERM and its KILL
RESERVE=15   # kept for the tables, the summary and the last archive
DRY=0
CAP_SCALE=1  # the dry run: 3 (caps protect GPU time; a loaded CI machine runs the CPU stand-ins slowly)
for a in "$@"; do
  case "$a" in
    --dry-run) DRY=1; CAP_SCALE=3 ;;
    *) echo "gpu_check: unknown option $a (usage: scripts/gpu_check.sh [--dry-run])" >&2; exit 2 ;;
  esac
done
UNTIL=${AMP_GPU_CHECK_UNTIL:-bench}
case "$UNTIL" in
  build|tests|headline|e2e|bench) ;;
  *) echo "gpu_check: AMP_GPU_CHECK_UNTIL must be build, tests, headline, e2e or bench, not \"$UNTIL\"" >&2; exit 2 ;;
esac
FAKE=${AMP_GPU_CHECK_FAKE:-}
[ -n "$FAKE" ] && [ $DRY = 0 ] && { echo "gpu_check: AMP_GPU_CHECK_FAKE is for dry runs only" >&2; exit 2; }

# Phase deadlines (seconds after START). The build leaves the tests at least 30 s, the tests leave
# the headline and what follows 200 s, the headline leaves the end-to-end runs and the benchmarks
# at least 80 s.
[ "$BUDGET" -ge 240 ] 2>/dev/null || { echo "gpu_check: AMP_GPU_CHECK_BUDGET must be at least 240 seconds" >&2; exit 2; }
END_ALL=$((BUDGET - RESERVE - GRACE))
TESTS_END=$((BUDGET - 200))
BUILD_END=$((TESTS_END - 30))
HEADLINE_END=$((BUDGET - 100))

JOBS=$(nproc 2>/dev/null || echo 16)
LOGS=$(mktemp -d)  # archived
DATA=$(mktemp -d)  # inputs written here (not archived)
if [ -n "${OUT:-}" ] && mkdir -p "$OUT"; then REPORT=$OUT/gpu_check.txt; else REPORT=$LOGS/gpu_check.txt; fi
# Nothing stays in the temporary directory: the inputs go, and the logs once archived in $OUT
# (without $OUT the report and the logs stay in $LOGS, which the last line names).
cleanup() {
  rm -rf "$DATA"
  if [ "$REPORT" = "$LOGS/gpu_check.txt" ]; then echo "gpu_check: report and logs in $LOGS"; else rm -rf "$LOGS"; fi
}
trap cleanup EXIT
: > "$REPORT"
failures=0
SUMMARY=()  # one line per stage

say() { echo "$@" | tee -a "$REPORT"; }
pass() { say "PASS: $*"; SUMMARY+=("PASS  $*"); }
fail() { say "FAIL: $*"; SUMMARY+=("FAIL  $*"); failures=$((failures + 1)); }
note() { say "note: $*"; SUMMARY+=("note  $*"); }
elapsed() { echo "$((SECONDS - START))s"; }
show_tail() { tail -n "${2:-25}" "$1" | sed 's/^/    /' | tee -a "$REPORT"; }
# Writes FILE atomically from stdin (aside, then renamed).
write_atomic() { cat > "$1.part" && mv -f "$1.part" "$1"; }
# The logs so far as one archive in $OUT (the device tool brings back at most 8 files); no
# checkpoints or data (*.bin).
archive_logs() {
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/gpu_check_logs.tgz.part" -C "$LOGS" --exclude gpu_check.txt --exclude '*.bin' . 2>/dev/null &&
    mv -f "$OUT/gpu_check_logs.tgz.part" "$OUT/gpu_check_logs.tgz"
}
summary_lines() {
  echo "== summary ($1, $(elapsed) of a ${BUDGET}s budget)"
  for line in "${SUMMARY[@]}"; do echo "  $line"; done
  echo "gpu_check: $failures failure(s), $(elapsed)"
}
# After every phase: the summary so far, where a run killed from outside still finds it.
phase_done() {
  say "== phase $1 done ($(elapsed))"
  [ -n "${OUT:-}" ] && summary_lines "after phase $1" | write_atomic "$OUT/gpu_check_summary.txt"
  archive_logs
  if [ "$1" = "$UNTIL" ] && [ "$1" != bench ]; then
    say "stopping after phase $1 (AMP_GPU_CHECK_UNTIL=$UNTIL)"
    finish
  fi
}
# Seconds a command may run now: the smallest of its cap ($1), its phase's deadline ($2, seconds
# after START, optional) and what the budget leaves before the reserve.
limit_for() {
  local end=$((START + END_ALL)) lim=$(($1 * CAP_SCALE))
  [ -n "${2:-}" ] && [ $((START + $2)) -lt "$end" ] && end=$((START + $2))
  [ $((end - SECONDS)) -lt "$lim" ] && lim=$((end - SECONDS))
  echo "$lim"
}
# bounded CAP [DEADLINE] -- cmd...: cmd under timeout -k with limit_for's limit; 125 (and nothing
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
# run_logged LOG CAP [DEADLINE] -- cmd...: bounded, stdout and stderr into LOG (with a line saying
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
  summary_lines "final" | tee -a "$REPORT"
  if [ -n "${OUT:-}" ]; then
    summary_lines "final" | write_atomic "$OUT/gpu_check_summary.txt"
    archive_logs
  fi
  exit $((failures > 0))
}

say "== amp_ddp GPU check ($(date -u +%Y-%m-%dT%H:%M:%SZ))$([ $DRY = 1 ] && echo ' -- DRY RUN: the CPU stands in for the device')"
say "plan (seconds after the start): build until ${BUILD_END}, tests until ${TESTS_END}, GPT-2 headline until ${HEADLINE_END}, end-to-end runs and benchmarks until ${END_ALL}; budget ${BUDGET}, ${RESERVE} s kept for the summary"

# Open MPI: as root, more ranks than cores, local transports; PMIx's banner about a missing
# compression library (harmless) silenced.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_btl_base_warn_component_unused=0 PMIX_MCA_pcompress_base_silence_warning=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
ORIG_PATH=$PATH

# ================================================================ phase 1: build
if [ $DRY = 1 ]; then
  # The Release build the test command made (CUDA or not: only CPU targets are used).
  BUILD=${AMP_GPU_CHECK_DRY_BUILD:-$ROOT/build}
  DEVICE=cpu
  TESTS=$BUILD/tests/gpu/amp_device_logic_tests
  HAVE_NCCL=0
  CMAKE=$(command -v cmake || true)
  [ -n "$CMAKE" ] || { fail "no cmake"; finish; }
  if [ -f "$BUILD/CMakeCache.txt" ]; then
    pass "configure (dry run: the existing $(basename "$BUILD")/)"
  elif run_logged "$LOGS/configure.log" 120 "$BUILD_END" -- "$CMAKE" -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release; then
    pass "configure (dry run)"
  else
    rc=$?; fail "configure ($(why $rc))"; show_tail "$LOGS/configure.log" 40; finish
  fi
  TARGETS=(amp_ddp amp_device_logic_tests bench_gpt_step bench_sampling)
else
  BUILD=$ROOT/build-gpu
  DEVICE=cuda
  TESTS=$BUILD/tests/gpu/amp_gpu_tests
  PREFIX=$BUILD/prefix  # inside the (git-ignored) build folder: it must never travel
  PREBUILT=0
  [ -x .gpu_prebuilt/amp_ddp ] && PREBUILT=1
  [ -d /usr/local/cuda/bin ] && export PATH=$PATH:/usr/local/cuda/bin  # after PATH: the image's nvcc wins
  if command -v nvidia-smi >/dev/null; then  # a wedged driver can hang nvidia-smi too
    say "GPU: $(bounded 20 -- nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  fi
  if [ $PREBUILT = 0 ]; then
    NVCC=$(command -v nvcc || true)
    [ -n "$NVCC" ] || { fail "no nvcc (CUDA toolkit) on PATH or in /usr/local/cuda/bin"; finish; }
    say "nvcc: $NVCC, $(bounded 20 -- "$NVCC" --version | tail -2 | head -1)"
    CXX_BIN=$(command -v g++ || command -v c++ || true)
    [ -n "$CXX_BIN" ] || { fail "no host C++ compiler (g++) found"; finish; }
    say "host compiler: $(bounded 20 -- "$CXX_BIN" --version | head -1)"
  fi
  # A cmake that runs: the image's (on PATH, or PyTorch's venv's pip package, which is static),
  # else the one from .gpu_debs/ below (that one needs libarchive13 and libcurl4 from the image).
  cmake_runs() { [ -n "$1" ] && bounded 20 -- "$1" --version >/dev/null 2>&1; }
  SYS_CMAKE=$(command -v cmake || true)
  if ! cmake_runs "$SYS_CMAKE"; then
    SYS_CMAKE=$(bounded 30 -- python3 -c "import cmake, os; print(os.path.join(cmake.CMAKE_BIN_DIR, 'cmake'))" 2>/dev/null || true)
    cmake_runs "$SYS_CMAKE" || SYS_CMAKE=
  fi
  # Debian packages -> private prefix
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
  if [ $PREBUILT = 1 ]; then
    mkdir -p "$BUILD/tests/gpu" "$BUILD/bench/gpu"
    if ! { install -m 755 .gpu_prebuilt/amp_ddp .gpu_prebuilt/libamp_cuda.so "$BUILD/" &&
           install -m 755 .gpu_prebuilt/amp_gpu_tests "$TESTS" &&
           install -m 755 .gpu_prebuilt/bench_gpu_step .gpu_prebuilt/bench_gpu_gemm .gpu_prebuilt/probe_fp8_gemm \
             "$BUILD/bench/gpu/" && install -m 755 .gpu_prebuilt/bench_gpt_step .gpu_prebuilt/bench_sampling "$BUILD/bench/"; } \
           2> "$LOGS/install.log"; then
      fail "prebuilt binaries: $(head -1 "$LOGS/install.log") (scripts/gpu_prepare.sh --prebuilt makes them all)"
      finish
    fi
    say "prebuilt: $(paste -sd ';' .gpu_prebuilt/MANIFEST)"
    BINS=("$BUILD/amp_ddp" "$BUILD/libamp_cuda.so" "$TESTS" "$BUILD"/bench/gpu/{bench_gpu_step,bench_gpu_gemm,probe_fp8_gemm} "$BUILD"/bench/{bench_gpt_step,bench_sampling})
    # Where a CUDA toolkit or PyTorch's wheels (nvidia/<library>/lib, nvidia/cu13/lib) keep
    # libcudart, libcublas(Lt) and libnccl: each library the loader cannot find is looked up there,
    # in this order, and its folder appended to LD_LIBRARY_PATH.
    PLACES=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib)
    mapfile -t -O ${#PLACES[@]} PLACES < <(bounded 30 -- python3 -c "
import glob, os
import nvidia
for root in nvidia.__path__:
    print('\n'.join(sorted(glob.glob(os.path.join(root, '*', 'lib')))))" 2>/dev/null)
    for lib in $(for b in "${BINS[@]}"; do ldd "$b" 2>/dev/null; done | awk '/not found/ {print $1}' | sort -u); do
      for dir in "${PLACES[@]}"; do
        [ -n "$dir" ] && [ -e "$dir/$lib" ] || continue
        case ":${LD_LIBRARY_PATH:-}:" in *":$dir:"*) ;; *) export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir ;; esac
        say "library: $lib from $dir"
        break
      done
    done
    for b in "${BINS[@]}"; do echo "== $b"; ldd "$b"; done > "$LOGS/ldd.txt" 2>&1
    missing=$(awk '/not found/ {print $1}' "$LOGS/ldd.txt" | sort -u | paste -sd ' ')
    if [ -n "$missing" ]; then
      fail "prebuilt binaries: the loader finds no $missing (looked in the prefix, ${PLACES[*]})"
      finish
    fi
    HAVE_NCCL=$(sed -n 's/^nccl //p' .gpu_prebuilt/MANIFEST)
    pass "prebuilt binaries load: $(grep -E 'lib(cudart|cublas|nccl)\.so' "$LOGS/ldd.txt" | awk '{print $1 " -> " $3}' | sort -u | paste -sd ';')"
  else
    CMAKE=${SYS_CMAKE:-$(command -v cmake || true)}
    if ! cmake_runs "$CMAKE"; then
      fail "no cmake that runs (neither the image's nor .gpu_debs/'s${CMAKE:+: $CMAKE})"
      [ -n "$CMAKE" ] && ldd "$CMAKE" 2>&1 | grep "not found" | tee -a "$REPORT"
      finish
    fi
    say "cmake: $(bounded 20 -- "$CMAKE" --version | head -1) ($CMAKE)"
    # NCCL: the toolkit's, else PyTorch's wheel (nvidia-nccl-cu12/-cu13 install nvidia/nccl/ or
    # nvidia/cu13/; nvidia is a namespace package without __file__).
    NCCL_ARGS=()
    if [ -f /usr/local/cuda/include/nccl.h ] || [ -f /usr/include/nccl.h ]; then
      say "NCCL: system"
    else
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
    POLICY_ARGS=()  # CMake 4 refuses package files that ask for policies older than 3.5
    [ "$(bounded 20 -- "$CMAKE" --version | head -1 | sed -E 's/[^0-9]*([0-9]+).*/\1/')" -ge 4 ] 2>/dev/null &&
      POLICY_ARGS=(-DCMAKE_POLICY_VERSION_MINIMUM=3.5)
    if run_logged "$LOGS/configure.log" 120 "$BUILD_END" -- "$CMAKE" -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
         -DAMP_CUDA=ON -DAMP_NCCL=AUTO -DAMP_GPU_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$NVCC" \
         -DCMAKE_CXX_COMPILER="$CXX_BIN" "${NCCL_ARGS[@]}" "${MPI_ARGS[@]}" "${POLICY_ARGS[@]}"; then
      pass "configure ($(grep -E "CUDA  |NCCL  " "$LOGS/configure.log" | sed 's/^-- *//' | tr -s ' ' | paste -sd';'))"
    else
      rc=$?; fail "configure ($(why $rc))"; show_tail "$LOGS/configure.log" 40; finish
    fi
    HAVE_NCCL=0
    grep -qE "NCCL +: ON" "$LOGS/configure.log" && HAVE_NCCL=1
    TARGETS=(amp_ddp amp_gpu_tests bench_gpu_step bench_gpu_gemm probe_fp8_gemm bench_gpt_step bench_sampling)
  fi
fi
if [ "${PREBUILT:-0}" = 1 ]; then :
elif run_logged "$LOGS/build.log" 330 "$BUILD_END" -- "$CMAKE" --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"; then
  warnings=$(grep -c "warning" "$LOGS/build.log" || true)
  pass "build ${TARGETS[*]} ($warnings warning lines, $(elapsed))"
else
  rc=$?; fail "build ($(why $rc))"; grep -E "error|Error" "$LOGS/build.log" | head -30 | tee -a "$REPORT"
  show_tail "$LOGS/build.log" 20; finish
fi
AMP=$BUILD/amp_ddp
say "$(bounded 20 -- "$AMP" --version 2>&1 | head -1)"
phase_done build

# ================================================================ phase 2: device tests
# One process per group. A binary that cannot start (loader error, MPI_Init failure) lists nothing:
# that is a failure, never a skip; only the communicator groups may be absent, when NCCL is not
# built (the dry run's CPU twin has no [nccl] group: those cases are NCCL's own).
case "$FAKE" in
  nolist) TESTS=/bin/false ;;
esac
GROUPS_RUN=(cast gemm ops tops loss amp optim graph model trainer zero comm nccl)
MAY_BE_ABSENT=" nccl "
[ $HAVE_NCCL = 0 ] && [ $DRY = 0 ] && MAY_BE_ABSENT=" comm nccl "
listing=$(bounded 30 "$TESTS_END" -- "$TESTS" --list-test-names-only "[.cuda]" 2> "$LOGS/test_listing.err")
listed_rc=$?  # Catch2 lists with a non-zero exit status (the count): only the listing itself counts
if [ -z "$(printf '%s' "$listing" | tr -d '[:space:]')" ]; then
  fail "device tests: $(basename "$TESTS") lists no [.cuda] cases (exit $listed_rc: it could not start or was built without them)"
  show_tail "$LOGS/test_listing.err" 15
else
  say "device tests: $(printf '%s\n' "$listing" | grep -c .) cases in $(basename "$TESTS")"
  for group in "${GROUPS_RUN[@]}"; do
    names=$(bounded 20 "$TESTS_END" -- "$TESTS" --list-test-names-only "[.cuda][$group]" 2>/dev/null)
    if [ -z "$(printf '%s' "$names" | tr -d '[:space:]')" ]; then
      if [ "$(limit_for 20 "$TESTS_END")" -lt 5 ]; then fail "tests [$group] (not run: its deadline passed)"
      elif [[ "$MAY_BE_ABSENT" == *" $group "* ]]; then note "tests [$group]: not built (no NCCL)"
      else fail "tests [$group]: no cases listed"; fi
      continue
    fi
    spec="[.cuda][$group]"
    # The dry run walks: one case per group (ctest runs them all on the CPU twin).
    [ $DRY = 1 ] && spec=$(printf '%s\n' "$names" | grep -m1 . | sed 's/[],[]/\\&/g')
    log=$LOGS/test_$group.log
    cmd=("$TESTS" "$spec" --durations yes)
    [ "$FAKE" = "hang:$group" ] && cmd=(sleep 100000)
    if run_logged "$log" 120 "$TESTS_END" -- "${cmd[@]}"; then
      pass "tests [$group]: $(grep -E "All tests passed" "$log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')"
    else
      rc=$?; fail "tests [$group] ($(why $rc))"; show_tail "$log" 40
    fi
  done
fi
phase_done tests

# ================================================================ phase 3: the headline
# GPT-2 124M (configs/gpt2_124m.yaml: bf16, 16 x 1024 tokens per step) on random tokens of an llm.c
# shard written here (no corpus on this machine): amp_ddp's steady step time and model FLOP
# utilization (scripts/scaling_model.py --mfu: every GEMM's FLOPs, attention in full T x T, against
# 989 TFLOP/s), again with fused attention and with fused attention and recomputation, and the
# PyTorch peer (autocast, attention written out and fused SDPA) in the same run.
BENCH=$LOGS/bench.jsonl
: > "$BENCH"
GPT2_SHARD=$DATA/gpt2_random_tokens.bin
GPT2_SETS=()
TORCH_GPT2_ARGS=()
[ $DRY = 1 ] && GPT2_SETS=(--set model.n_layer=2 --set model.n_head=2 --set model.n_embd=64 --set model.seq_len=128
                           --set data.batch_size=2 --set run.steps=6 --set run.log_interval=2 --set run.threads=1)
[ $DRY = 1 ] && TORCH_GPT2_ARGS=(--layers 2 --heads 2 --embd 64 --seq 128 --batch 2)
# What every GPT-2 run below shares: the config on this device, the random-token shard written
# next, no evaluation, sampling or final checkpoint (each run adds its steps, logging and folder,
# then GPT2_SETS, then its own settings).
GPT2_RUN=("$AMP" configs/gpt2_124m.yaml --set run.device=$DEVICE --set "data.train_tokens=[\"$GPT2_SHARD\"]"
          --set "data.eval_tokens=[]" --set run.eval_interval=0 --set run.sample_interval=0 --set sample.tokens=0
          --set checkpoint.final=false)
# The headline's runs: 30 steps, logged every 10.
HEADLINE_STEPS=(--set run.steps=30 --set run.log_interval=10 --set run.progress=lines)
bounded 30 "$HEADLINE_END" -- python3 - "$GPT2_SHARD" $([ $DRY = 1 ] && echo 20000 || echo 2097152) <<'PY'
import array, random, sys
n = int(sys.argv[2])
header = array.array("i", [0] * 256)
header[0], header[1], header[2] = 20240520, 1, n
rng = random.Random(0)
tokens = array.array("H", (rng.randrange(50257) for _ in range(n)))
with open(sys.argv[1], "wb") as f:
    header.tofile(f)
    tokens.tofile(f)
PY
if run_logged "$LOGS/amp_ddp_gpt2.log" 150 "$HEADLINE_END" -- "${GPT2_RUN[@]}" "${HEADLINE_STEPS[@]}" \
     --set run.out_dir="$LOGS/gpt2" "${GPT2_SETS[@]}"; then
  bounded 20 -- python3 scripts/scaling_model.py --mfu "$LOGS/gpt2/summary.json" > "$LOGS/gpt2_mfu.txt" 2>&1
  pass "gpt-2 124m on $DEVICE: $(head -1 "$LOGS/gpt2_mfu.txt")"
  grep -h '^{' "$LOGS/gpt2_mfu.txt" >> "$BENCH"
else
  rc=$?; fail "gpt-2 124m on $DEVICE ($(why $rc))"; show_tail "$LOGS/amp_ddp_gpt2.log" 30
fi
# The same with fused attention, and with fused attention and recomputed blocks (issue 22's memory
# answers): step time, MFU and activation bytes next to the explicit run's and PyTorch's fused SDPA;
# and with FP8 linear layers (precision.compute fp8): on FP8 tensor cores (cuBLASLt FP8 GEMMs on FP8
# codes, precision.fp8.gemm auto: never run on a GPU before this check) and emulated (FP8-quantized
# values in BF16 GEMMs), their losses side by side in the logs. Last, in what time the headline has
# left, explicit attention with recomputed blocks (the memory answer that keeps cuBLAS's products;
# never measured on a GPU yet): noted, not failed, when no time is left for it.
for variant in fused fused_recompute torch fp8 fp8_emulated explicit_recompute; do
  # the PyTorch peer before the FP8 runs: the comparison the headline exists for
  if [ $variant = torch ]; then
    if run_logged "$LOGS/torch_gpt2.log" 120 "$HEADLINE_END" -- env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" \
         PATH="$ORIG_PATH" python3 bench/gpu/torch_gpt_step.py --dtype bf16 "${TORCH_GPT2_ARGS[@]}"; then :
    else rc=$?; note "PyTorch GPT-2 peer failed ($(why $rc))"; fi
    grep -h '^{' "$LOGS/torch_gpt2.log" >> "$BENCH"
    continue
  fi
  # Before the FP8 runs: which forms of cuBLASLt's FP8 GEMM this GPU runs (a diagnostic, not a test).
  if [ $variant = fp8 ] && [ $DRY = 0 ]; then
    run_logged "$LOGS/probe_fp8_gemm.log" 30 "$HEADLINE_END" -- "$BUILD/bench/gpu/probe_fp8_gemm"
    note "cuBLASLt FP8 forms: $(grep -c ' 0 of ' "$LOGS/probe_fp8_gemm.log") of $(grep -c 'algorithms ran' "$LOGS/probe_fp8_gemm.log") ran no algorithm (probe_fp8_gemm.log)"
  fi
  VSETS=(--set model.attention=fused)
  [ $variant = fused_recompute ] && VSETS+=(--set model.recompute=block)
  [ $variant = explicit_recompute ] && VSETS=(--set model.recompute=block)
  [ $variant = fp8 ] && VSETS=(--set precision.compute=fp8)
  [ $variant = fp8_emulated ] && VSETS=(--set precision.compute=fp8 --set precision.fp8.gemm=emulated)
  # The CPU has no FP8 GEMMs: its fp8 run is already the emulation.
  if [ $variant = fp8_emulated ] && [ $DRY = 1 ]; then note "gpt-2 124m on $DEVICE, fp8_emulated: the fp8 run (no FP8 GEMMs here)"; continue; fi
  if run_logged "$LOGS/amp_ddp_gpt2_$variant.log" 150 "$HEADLINE_END" -- "${GPT2_RUN[@]}" "${HEADLINE_STEPS[@]}" \
       --set run.out_dir="$LOGS/gpt2_$variant" "${GPT2_SETS[@]}" "${VSETS[@]}"; then
    bounded 20 -- python3 scripts/scaling_model.py --mfu "$LOGS/gpt2_$variant/summary.json" > "$LOGS/gpt2_${variant}_mfu.txt" 2>&1
    pass "gpt-2 124m on $DEVICE, $variant: $(head -1 "$LOGS/gpt2_${variant}_mfu.txt"); $(grep -m1 -o 'activations [0-9.]* [KMGT]iB' "$LOGS/amp_ddp_gpt2_$variant.log")"
    grep -h '^{' "$LOGS/gpt2_${variant}_mfu.txt" | sed "s/^{/{\"variant\": \"$variant\", /" >> "$BENCH"
  else
    rc=$?
    if [ $variant = explicit_recompute ] && [ $rc = 125 ]; then note "gpt-2 124m on $DEVICE, $variant: $(why $rc)"; continue; fi
    fail "gpt-2 124m on $DEVICE, $variant ($(why $rc))"; show_tail "$LOGS/amp_ddp_gpt2_$variant.log" 30
  fi
done
phase_done headline

# ================================================================ phase 4: end to end on one rank
# One GPU: one rank (NCCL refuses two ranks on one device), so the NCCL path of the trainer runs
# only in the [comm]/[nccl] tests, with one rank. Each run captures its step into a CUDA graph at
# step 3.
E2E=$LOGS/e2e
DRY_SHORT=()
[ $DRY = 1 ] && DRY_SHORT=(--set run.threads=1 --set run.eval_iters=4)
if run_logged "$LOGS/amp_ddp.log" 60 -- "$AMP" configs/seed_dynamic.yaml --set run.device=$DEVICE \
     --set run.steps=$([ $DRY = 1 ] && echo 40 || echo 2000) --set model.hidden='[1024, 1024]' --set data.batch_size=128 \
     --set data.synthetic.features=784 --set data.synthetic.outputs=10 --set data.synthetic.train_samples=16384 \
     --set optimizer.type=adamw --set optimizer.lr=1e-4 --set precision.loss_scale.init_scale=1024 \
     --set run.progress=lines --set run.log_interval=$([ $DRY = 1 ] && echo 20 || echo 500) --set checkpoint.final=false \
     --set run.out_dir="$E2E" "${DRY_SHORT[@]}"; then
  pass "amp_ddp on $DEVICE: $(tail -1 "$LOGS/amp_ddp.log")"
  bounded 20 -- python3 -c "import json; [print(json.dumps({'bench': 'amp_ddp', 'samples_per_second': s['samples_per_second'], 'skipped': s['skipped_steps']})) for s in [json.load(open('$E2E/summary.json'))]]" >> "$BENCH" 2>/dev/null
else
  rc=$?; fail "amp_ddp on $DEVICE ($(why $rc))"; show_tail "$LOGS/amp_ddp.log" 20
fi

# The GPT on one device: every transformer op inside a captured step, FP16 with dynamic scaling,
# on text written here (no package needed), ending with an evaluation.
GPT_TEXT=$DATA/gpt_text.txt
python3 -c "
w = 'the quick brown fox jumps over a lazy dog while seven wizards judge boxing near old towers'.split()
print('\\n'.join(' '.join(w[(i * 7 + k * 3) % len(w)] for k in range(3 + i % 9)) + '.' for i in range(20000)))" > "$GPT_TEXT"
GPT_STEPS=$([ $DRY = 1 ] && echo 12 || echo 300)
if run_logged "$LOGS/amp_ddp_gpt.log" 90 -- "$AMP" configs/gpt_fortunes_fp16.yaml --set run.device=$DEVICE \
     --set "data.text_files=[\"$GPT_TEXT\"]" --set run.steps=$GPT_STEPS --set run.eval_interval=$GPT_STEPS \
     --set run.sample_interval=0 --set run.progress=lines --set run.log_interval=$((GPT_STEPS / 3)) \
     --set checkpoint.final=true --set run.out_dir="$LOGS/gpt" "${DRY_SHORT[@]}"; then
  pass "gpt on $DEVICE: $(tail -1 "$LOGS/amp_ddp_gpt.log")"
  # `amp_ddp sample` of its final checkpoint is the run's final sample, byte for byte: the masters
  # cast on the host a piece at a time as the optimizer cast them on the device, then decoded there.
  GPT_CKPT=$(ls "$LOGS"/gpt/checkpoints/ckpt_step*.bin 2>/dev/null | tail -1)
  if run_logged "$LOGS/amp_ddp_sample.log" 30 -- bash -c '"$1" sample "$2" --device "$3" --threads 1 > "$4"' _ \
       "$AMP" "$GPT_CKPT" "$DEVICE" "$LOGS/sample.txt" &&
     bounded 20 -- python3 -c "
import json, sys
want = [r['sample'] for r in map(json.loads, open('$LOGS/gpt/metrics.jsonl')) if 'sample' in r][-1]
sys.exit(0 if open('$LOGS/sample.txt').read() == want + '\\n' else 1)"; then
    pass "amp_ddp sample on $DEVICE: the final checkpoint's sample is the run's final sample"
  else
    rc=$?; fail "amp_ddp sample on $DEVICE: not the run's final sample ($(why $rc))"
    show_tail "$LOGS/amp_ddp_sample.log" 10; show_tail "$LOGS/sample.txt" 5
  fi
else
  rc=$?; fail "gpt on $DEVICE ($(why $rc))"; show_tail "$LOGS/amp_ddp_gpt.log" 30
fi

# Gradient accumulation on the device: FP32, 8 sequences x 2 micro-batches against 16 in one, same
# samples per step: every logged loss within 1e-4 relative (cuBLAS sums in other orders per shape).
GA_OK=1
for ga in "16 1" "8 2"; do
  read -r bs acc <<< "$ga"
  run_logged "$LOGS/amp_ddp_ga_$acc.log" 60 -- "$AMP" configs/gpt_fortunes_fp32.yaml --set run.device=$DEVICE \
    --set "data.text_files=[\"$GPT_TEXT\"]" --set run.steps=20 --set run.eval_interval=0 --set run.sample_interval=0 \
    --set sample.tokens=0 --set run.log_interval=5 --set run.progress=off --set checkpoint.final=false \
    --set data.batch_size=$bs --set data.grad_accum_steps=$acc --set run.out_dir="$LOGS/ga_$acc" "${DRY_SHORT[@]}" || GA_OK=0
done
if [ $GA_OK = 1 ] && bounded 20 -- python3 -c "
import json, sys
l = [[m['loss'] for m in map(json.loads, open(f'$LOGS/ga_{a}/metrics.jsonl')) if 'loss' in m] for a in (1, 2)]
w = max(abs(x - y) / abs(x) for x, y in zip(*l)) if len(l[0]) == len(l[1]) == 4 else 1.0
print(f'max relative loss difference {w:.3g}'); sys.exit(0 if w < 1e-4 else 1)" > "$LOGS/ga_compare.txt" 2>&1; then
  pass "gradient accumulation on $DEVICE: 8 x 2 micro-batches == 16, $(cat "$LOGS/ga_compare.txt")"
else
  fail "gradient accumulation on $DEVICE: $(cat "$LOGS/ga_compare.txt" 2>/dev/null)"; show_tail "$LOGS/amp_ddp_ga_2.log" 20
fi
phase_done e2e

# ================================================================ phase 5: benchmarks (not tests)
# Where the GPT-2 step's time goes on this GPU: bench_gpt_step --device cuda times every model op
# (each waiting for the device: nothing overlaps, no graph) with fused attention, and compares the
# step's GEMMs with the same GEMMs bare; its "model's ops" table goes into the report. The dry
# run: the tiny GPT on the CPU.
STEP_ARGS=(--layers 12 --embd 768 --heads 12 --seq 1024 --vocab 50257 --batch 16 --precision bf16 --steps 5
           --rounds 1 --attention fused --device "$DEVICE")
[ $DRY = 1 ] && STEP_ARGS=(--layers 2 --embd 64 --heads 2 --seq 128 --vocab 50257 --batch 2 --precision bf16 --steps 2
                           --rounds 1 --attention fused --device cpu)
if run_logged "$LOGS/bench_gpt_step.log" 60 -- "$BUILD/bench/bench_gpt_step" "${STEP_ARGS[@]}"; then
  pass "where the GPT-2 step's time goes (bench_gpt_step, fused attention, every op waited for): $(grep -m1 -o 'GEMMs [0-9.]* ms.*' "$LOGS/bench_gpt_step.log")"
  sed -n '/^the model.s ops/,/^  GEMMs/p' "$LOGS/bench_gpt_step.log" | tee -a "$REPORT"
else
  rc=$?
  if [ $rc = 125 ]; then note "bench_gpt_step not run (time budget)"; else fail "bench_gpt_step ($(why $rc))"; show_tail "$LOGS/bench_gpt_step.log" 15; fi
fi

# Sampling on this GPU: a generated token with the key/value cache against the whole context's
# forward pass, GPT-2 124M (bench_sampling: ms a token, the ratio to one read of the weights and
# the cache, and the logits' agreement). The dry run: a tiny GPT on the CPU.
SAMPLE_ARGS=(--device "$DEVICE" --tokens 8 --contexts 16,1000)
[ $DRY = 1 ] && SAMPLE_ARGS=(--device cpu --layers 2 --embd 64 --heads 2 --seq 128 --tokens 4 --contexts 8,100)
if run_logged "$LOGS/bench_sampling.log" 40 -- "$BUILD/bench/bench_sampling" "${SAMPLE_ARGS[@]}"; then
  pass "sampling (bench_sampling): $(grep -E '^\| [0-9]+ \|' "$LOGS/bench_sampling.log" | awk -F'|' '{gsub(/ /, ""); printf "context %s: %s -> %s ms a token (%s); ", $2, $3, $4, $5}')"
  sed -n '/^| context/,/^$/p' "$LOGS/bench_sampling.log" | tee -a "$REPORT"
else
  rc=$?
  if [ $rc = 125 ]; then note "bench_sampling not run (time budget)"; else fail "bench_sampling ($(why $rc))"; show_tail "$LOGS/bench_sampling.log" 15; fi
fi

# Where fused attention overtakes the explicit path on this GPU: GPT-2 124M at 16 x 1024 tokens per
# step split into T = 256 .. 2048 (batch 64 .. 8), 12 steps of each path, steady step time from
# the logged intervals (scripts/scaling_model.py --mfu). The dry run: T = 32 and 64 on the tiny GPT.
CROSS=("256:64" "512:32" "1024:16" "2048:8")
[ $DRY = 1 ] && CROSS=("32:8" "64:4")
for tb in "${CROSS[@]}"; do
  T=${tb%%:*}; B=${tb##*:}
  for attn in explicit fused; do
    name=cross_${attn}_$T
    if run_logged "$LOGS/$name.log" 60 -- "${GPT2_RUN[@]}" --set run.steps=12 --set run.log_interval=4 \
         --set run.progress=off --set run.out_dir="$LOGS/$name" "${GPT2_SETS[@]}" \
         --set model.seq_len=$T --set data.batch_size=$B --set model.attention=$attn; then
      bounded 20 -- python3 scripts/scaling_model.py --mfu "$LOGS/$name/summary.json" 2>/dev/null |
        grep -h '^{' | sed "s/^{/{\"crossover\": \"$attn\", \"seq\": $T, \"batch\": $B, /" >> "$BENCH"
    else
      rc=$?
      if [ $rc = 125 ]; then note "attention crossover T=$T $attn not run (time budget)"
      else fail "attention crossover T=$T $attn ($(why $rc))"; show_tail "$LOGS/$name.log" 15; fi
    fi
  done
done

if [ $DRY = 1 ]; then
  note "MLP benchmarks: dry run (bench_gpu_step, bench_gpu_gemm and their PyTorch peer need a GPU)"
else
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
fi
phase_done bench

# ================================================================ the tables (on the reserve)
if ! command -v python3 >/dev/null; then
  say "no python3; raw results:"; cat "$BENCH" | tee -a "$REPORT"; finish
fi
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
    ours = next((r for r in mfu if "variant" not in r), None)  # explicit attention: the reference row
    for r in mfu:
        tok = r["samples_per_rank_step"] * 1024
        print(f"| amp_ddp, {r.get('variant', 'explicit')} | {r['step_ms']:.1f} | {tok / (r['step_ms'] * 1e-3):,.0f} "
              f"| {r['tflops']:.1f} | {r['mfu']:.1%} | |")
    for r in tg2:
        if "error" in r:
            print(f"| PyTorch ({r['attention']} attention) | {r['error'][:80]} | | | | |")
            continue
        flops = ours["tflops"] * ours["step_ms"] / r["step_ms"] if ours else None  # same model FLOPs
        cells = ["-", "-", "-"] if not ours else [f"{flops:.1f}", f"{flops / 989:.1%}", f"{r['step_ms'] / ours['step_ms']:.2f}x"]
        print(f"| PyTorch {r['torch']} autocast, {r['attention']} attention, {r['optimizer']} AdamW | {r['step_ms']:.1f} "
              f"| {r['tokens_per_s']:,.0f} | " + " | ".join(cells) + " |")
cross = {}
for r in rows:
    if "crossover" in r:
        cross.setdefault((r["seq"], r["batch"]), {})[r["crossover"]] = r["step_ms"]
if cross:
    print()
    print("| attention crossover, GPT-2 124M, T | batch | explicit step ms | fused step ms | fused / explicit |")
    print("|---|---|---|---|---|")
    for (t, b), v in sorted(cross.items()):
        e, f = v.get("explicit"), v.get("fused")
        cells = [f"{e:.1f}" if e else "-", f"{f:.1f}" if f else "-", f"{f / e:.2f}" if e and f else "-"]
        print(f"| {t} | {b} | " + " | ".join(cells) + " |")
for r in rows:
    if r.get("bench") == "amp_ddp":
        print(f"\namp_ddp end to end (784-1024-1024-10 MLP, synthetic MSE data, fp16, batch 128, CUDA graph): "
              f"{r['samples_per_second']:.0f} samples/s, {r['skipped']} skipped steps")
PY
finish
