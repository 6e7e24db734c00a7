#!/usr/bin/env bash
# Runs HERE (Debian 12 with its package archive), before a GPU check: downloads, without installing
# anything, the Debian packages that building and running amp_ddp on the GPU machine needs and its
# image lacks (it has CUDA, NCCL, PyTorch and CMake, but no network) into .gpu_debs/ (git-ignored;
# the GPU run carries it). scripts/gpu_check.sh unpacks them there with dpkg -x into a private
# prefix. The tree that travels is limited to 64 MiB, so the set stays well under that.
# Usage: scripts/gpu_prepare.sh [--with-fmnist] [--no-cmake]
set -euo pipefail
cd "$(dirname "$0")/.."

with_fmnist=0; with_cmake=1
for a in "$@"; do
  case "$a" in
    --with-fmnist) with_fmnist=1 ;;
    --no-cmake) with_cmake=0 ;;
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
total=$(du -sb .gpu_debs | cut -f1)
echo "gpu_prepare: ${#PKGS[@]} packages, $((total / 1048576)) MiB in .gpu_debs/"
if ((total > 60 * 1048576)); then
  echo "gpu_prepare: .gpu_debs/ is over 60 MiB: the tree carried to the GPU machine would exceed its limit" >&2
  exit 1
fi
