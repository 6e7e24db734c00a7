#!/usr/bin/env bash
# CPU training throughput of the default MLP (784-1024-1024-10, batch 128, AdamW) in FP32/FP16/BF16
# with 1 and 2 threads, next to PyTorch (Debian's python3-torch with OpenBLAS, installed here if
# missing) on the same model, batch and threads, measured in the same run; then the step's FLOP
# rate against oneDNN's bare matmul rate on the same shapes (bench_step). Prints the machine, the
# BLAS PyTorch actually called, and Markdown tables; no ratio unless the peer ran OpenBLAS.
# Usage: scripts/bench_train.sh [steps (default 300)] [batch (default 128)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
batch=${2:-128}
bin=${AMP_BUILD:-build}
source scripts/peer_env.sh
peer() { run_peer torch_mlp.py "$1" --precision "$2" --batch "$batch" --steps 200; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
     "$(grep -o -w 'avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | xargs | sed 's/^$/no AVX-512/')"
probe=$(peer 1 fp32)
blas=$(describe_peer "$probe")
echo "peer: PyTorch called $blas"
peer_bf16=0
case "$blas" in *"oneDNN bf16: True"*) peer_bf16=1 ;; esac
declare -A peer_fp32
honest=1
case "$blas" in
  *openblas*OpenBLAS*) ;;
  *) honest=0; echo "bench_train: PyTorch did not run OpenBLAS: no ratios are printed (a handicapped peer is no result)" >&2 ;;
esac
echo
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
      peer=$(peer "$threads" "$prec" | /usr/bin/python3 -c "import json,sys;print(round(json.load(sys.stdin)['samples_per_second']))")
      ratio="(no ratio)"
      ((honest)) && ratio=$(/usr/bin/python3 -c "print(f'{$ours/$peer:.2f}')")
      if [ "$prec" = bf16 ] && ((!peer_bf16)); then
        # PyTorch has no fast BF16 path on this CPU: its best way to train this model here is FP32.
        ratio="(PyTorch has no BF16 kernel on this CPU)"
        ((honest)) && ratio="$(/usr/bin/python3 -c "print(f'{$ours/${peer_fp32[$threads]}:.2f}')") vs its FP32"
      fi
      [ "$prec" = fp32 ] && peer_fp32[$threads]=$peer
      echo "| $prec | $threads | $ours | $peer | $ratio |"
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
