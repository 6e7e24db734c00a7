#!/usr/bin/env bash
# Runs HERE (Debian 12 with its package archive), before a GPU check: downloads, without installing
# anything, the Debian packages that building and running amp_ddp on the GPU machine needs and its
# image lacks (it has CUDA, NCCL, PyTorch and CMake, but no network) into .gpu_debs/ (git-ignored;
# the GPU run carries it). scripts/gpu_check.sh unpacks them there with dpkg -x into a private
# prefix. The tree that travels is limited to 64 MiB, so the set stays well under that.
#
# --prebuilt[=BUILD] also brings this machine's CUDA build (default build/, configured with CUDA
# for sm_90 and NCCL; its GPU targets are brought up to date first) to .gpu_prebuilt/ (git-ignored):
# amp_ddp, amp_gpu_tests, bench_gpu_step, bench_gpu_gemm, probe_fp8_gemm, bench_gpt_step and
# bench_sampling, stripped, with a MANIFEST naming the commit they were built from. gpu_check.sh then runs them
# instead of building (a device lease is minutes: the build there costs a quarter of it), so carry
# both folders:
#     device run: command "scripts/gpu_check.sh", carry [".gpu_debs", ".gpu_prebuilt"]
# Usage: scripts/gpu_prepare.sh [--with-fmnist] [--no-cmake] [--prebuilt[=BUILD]]
set -euo pipefail
cd "$(dirname "$0")/.."

with_fmnist=0; with_cmake=1; prebuilt=""
for a in "$@"; do
  case "$a" in
    --with-fmnist) with_fmnist=1 ;;
    --no-cmake) with_cmake=0 ;;
    --prebuilt) prebuilt=build ;;
    --prebuilt=*) prebuilt=${a#--prebuilt=} ;;
    *) echo "gpu_prepare: unknown option $a" >&2; exit 2 ;;
  esac
done

PKGS=(
  # build-time headers and CMake packages, with their runtime libraries
  libyaml-cpp-dev libyaml-cpp0.7 libdnnl-dev libdnnl2 ocl-icd-libopencl1 catch2 nlohmann-json3-dev
  libcli11-dev zlib1g-dev zlib1g
  # Open MPI 4.1 (relocated there through OPAL_PREFIX) and the libraries it and its plugins load
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libevent-core-2.1-7 libevent-pthreads-2.1-7
  libhwloc15 libpmix2 libmunge2 libfabric1 libibverbs1 ibverbs-providers librdmacm1 libnl-3-200
  libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libucx0 libnuma1
)
((with_cmake)) && PKGS+=(cmake cmake-data libjsoncpp25 librhash0 libuv1)
((with_fmnist)) && PKGS+=(dataset-fashion-mnist)
# Binaries built here also need the runtime libraries a compiler would have brought there.
[ -n "$prebuilt" ] && PKGS+=(libgomp1 libpcre2-8-0)

if ! apt-cache show libdnnl2 >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
fi
rm -rf .gpu_debs
mkdir -p .gpu_debs
(cd .gpu_debs && apt-get download -q "${PKGS[@]}" 2>&1 | grep -v "unsandboxed" || true)
missing=()
for p in "${PKGS[@]}"; do
  compgen -G ".gpu_debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "gpu_prepare: could not download: ${missing[*]}" >&2
  exit 1
fi
echo "gpu_prepare: ${#PKGS[@]} packages, $(($(du -sb .gpu_debs | cut -f1) / 1048576)) MiB in .gpu_debs/"

rm -rf .gpu_prebuilt
if [ -n "$prebuilt" ]; then
  cache=$prebuilt/CMakeCache.txt
  [ -f "$cache" ] || { echo "gpu_prepare: $prebuilt is not a configured build folder (no CMakeCache.txt)" >&2; exit 1; }
  # the machine code nvcc is asked for (CMake writes it into each CUDA target's flags.make)
  arch=$(grep -rhoE "sm_[0-9]+a?" "$prebuilt" --include=flags.make | sort -u | paste -sd, -)
  [[ ",$arch," == *",sm_90,"* || ",$arch," == *",sm_90a,"* ]] ||
    { echo "gpu_prepare: $prebuilt builds CUDA machine code for '${arch:-nothing}', not sm_90 (the H100/H200)" >&2; exit 1; }
  targets=(amp_ddp amp_cuda_module amp_gpu_tests bench_gpu_step bench_gpu_gemm probe_fp8_gemm bench_gpt_step bench_sampling)
  cmake --build "$prebuilt" -j "$(nproc)" --target "${targets[@]}" > /dev/null ||
    { echo "gpu_prepare: building ${targets[*]} in $prebuilt failed" >&2; exit 1; }
  mkdir -p .gpu_prebuilt
  for t in "${targets[@]}"; do
    file=$t
    [ "$t" = amp_cuda_module ] && file=libamp_cuda.so  # amp_ddp's CUDA backend, opened when a run needs it
    f=$(find "$prebuilt" -name "$file" -type f -perm -u+x -not -path "*/CMakeFiles/*" | head -1)
    [ -n "$f" ] || { echo "gpu_prepare: no $file in $prebuilt" >&2; exit 1; }
    strip -o ".gpu_prebuilt/$file" "$f"
  done
  readelf -d .gpu_prebuilt/libamp_cuda.so | grep -q "libnccl" && nccl=1 || nccl=0
  {
    echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo '+uncommitted changes')"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $prebuilt, CUDA architectures $arch, nvcc $(sed -n 's/.*CMAKE_CUDA_COMPILER_VERSION "\(.*\)".*/\1/p' "$prebuilt"/CMakeFiles/*/CMakeCUDACompiler.cmake | head -1)"
    echo "nccl $nccl"
  } > .gpu_prebuilt/MANIFEST
  echo "gpu_prepare: ${targets[*]} ($(($(du -sb .gpu_prebuilt | cut -f1) / 1048576)) MiB) in .gpu_prebuilt/: $(head -1 .gpu_prebuilt/MANIFEST)"
fi
total=$(du -sbc .gpu_debs .gpu_prebuilt 2>/dev/null | tail -1 | cut -f1)
if ((total > 60 * 1048576)); then
  echo "gpu_prepare: .gpu_debs/ and .gpu_prebuilt/ are over 60 MiB: the tree carried to the GPU machine would exceed its limit" >&2
  exit 1
fi
