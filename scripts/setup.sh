#!/usr/bin/env bash
# Installs what amp_ddp needs from Debian packages (skipping what is there) and builds it.
# Idempotent. Usage: scripts/setup.sh [--no-build] [--asan]
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libyaml-cpp-dev catch2 libdnnl-dev
      zlib1g-dev nlohmann-json3-dev libcli11-dev dataset-fashion-mnist python3 python3-matplotlib
      fortunes   # English text for the GPT configs (configs/gpt_fortunes_*.yaml)
      slurmctld slurmd slurm-client munge iproute2)   # the SLURM and network-namespace e2e tests
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

build=1; asan=0
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --asan) asan=1 ;;
    *) echo "setup: unknown option $a" >&2; exit 2 ;;
  esac
done
jobs=$(nproc)
if ((build)); then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
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
