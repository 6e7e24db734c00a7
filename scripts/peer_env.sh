# Sourced by the benchmark scripts: the PyTorch peer at its best. Installs Debian's python3-torch,
# python3-yaml and OpenBLAS (OpenMP build) if missing, defines run_peer SCRIPT THREADS ARGS... (the peer under
# OpenBLAS with the core-type overrides unset for it alone) and describe_peer JSON (what BLAS it ran).
# The peer runs at its best: PyTorch from Debian calls the libblas.so.3 it finds first, so it is
# pointed at OpenBLAS (OpenMP build) explicitly, whatever the alternatives system selects (a
# reference BLAS pulled in by another package is 5x slower), with OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset for the peer alone (forcing a core type can select slow kernels).
pkgs=()
/usr/bin/python3 -c "import torch" 2>/dev/null || pkgs+=(python3-torch)
/usr/bin/python3 -c "import yaml" 2>/dev/null || pkgs+=(python3-yaml)  # the GPT peer reads the config's text files
dpkg-query -W -f='${Status}' libopenblas0-openmp 2>/dev/null | grep -q "install ok installed" || pkgs+=(libopenblas0-openmp)
if ((${#pkgs[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null
fi
openblas_dir=/usr/lib/x86_64-linux-gnu/openblas-openmp
run_peer() {
  local script=$1 threads=$2
  shift 2
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE LD_LIBRARY_PATH="$openblas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      OMP_NUM_THREADS="$threads" /usr/bin/python3 "bench/peers/$script" --threads "$threads" "$@"
}
# "libs | config | core | torch | oneDNN" of a peer's JSON line.
describe_peer() {
  /usr/bin/python3 -c "import json,sys; j=json.loads(sys.argv[1]); print(', '.join(j['blas']) or 'none mapped', '|', j['blas_config'] or 'not OpenBLAS', '| core', j['blas_core'] or '?', '| torch', j['torch'], '| oneDNN', j['onednn'] or 'none')" "$1"
}
# The peer's loss against amp_ddp's over the same number of steps: "ok" when the peer's mean loss of
# its timed steps lies within [0.5x, 2x] of amp_ddp's mean training loss (a peer that memorized a
# batch, or diverged, is no peer), else the reason. Usage: peer_loss_ok PEER_JSON AMP_LOSS
peer_loss_ok() {
  /usr/bin/python3 -c "
import json, math, sys
j, ours = json.loads(sys.argv[1]), float(sys.argv[2])
m = j['loss_mean']
ok = math.isfinite(m) and 0.5 * ours <= m <= 2.0 * ours
print('ok' if ok else f'peer loss {m:.4f} outside [0.5x, 2x] of amp_ddp loss {ours:.4f}')" "$1" "$2"
}
