#!/usr/bin/env bash
# CPU training throughput of the default MLP (784-1024-1024-10, batch 128, AdamW) in FP32/FP16/BF16
# with 1 and 2 threads, next to PyTorch (Debian's python3-torch, installed here if missing) on the
# same model, batch and threads, measured in the same run; then the step's FLOP rate against
# oneDNN's bare matmul rate on the same shapes (bench_step). Prints Markdown tables.
# Usage: scripts/bench_train.sh [steps (default 300)] [batch (default 128)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
batch=${2:-128}
bin=${AMP_BUILD:-build}
# PyTorch from Debian runs FP32 GEMMs through the libblas.so.3 alternative: OpenBLAS, not the reference BLAS.
if ! /usr/bin/python3 -c "import torch" 2>/dev/null || ! dpkg -s libopenblas0-openmp >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends python3-torch libopenblas0-openmp >/dev/null
fi
out=$(mktemp -d)
echo "| precision | threads | amp_ddp samples/s | PyTorch samples/s | ratio |"
echo "|---|---|---|---|---|"
for threads in 1 2; do
  for prec in fp32 fp16 bf16; do
    "$bin/amp_ddp" configs/fmnist_mlp_$prec.yaml --set run.steps="$steps" --set run.log_interval="$steps" \
        --set run.threads="$threads" --set data.batch_size="$batch" --set data.eval_images='""' \
        --set data.eval_labels='""' --set checkpoint.final=false --set run.progress=off \
        --set run.out_dir="$out/${prec}_$threads" > /dev/null
    ours=$(/usr/bin/python3 -c "import json;print(round(json.load(open('$out/${prec}_$threads/summary.json'))['samples_per_second']))")
    if [ "$prec" = fp16 ]; then
      echo "| $prec | $threads | $ours | (no FP16 autocast on CPU) | |"
    else
      peer=$(OMP_NUM_THREADS=$threads /usr/bin/python3 bench/peers/torch_mlp.py --precision "$prec" --threads "$threads" \
             --batch "$batch" --steps 200 | /usr/bin/python3 -c "import json,sys;print(round(json.load(sys.stdin)['samples_per_second']))")
      echo "| $prec | $threads | $ours | $peer | $(/usr/bin/python3 -c "print(f'{$ours/$peer:.2f}')") |"
    fi
  done
done
rm -rf "$out"
echo
for threads in 1 2; do
  for prec in fp32 fp16 bf16; do
    echo "bench_step --precision $prec --threads $threads --batch $batch:"
    "$bin/bench/bench_step" --precision "$prec" --threads "$threads" --batch "$batch" | tail -1
  done
done
