#!/usr/bin/env bash
# CPU training throughput of the default MLP (784-1024-1024-10, batch 128, AdamW) in FP32/FP16/BF16
# with 1 and 2 threads, next to PyTorch (Debian's python3-torch with OpenBLAS, installed here if
# missing) on the same model, batch, threads, data (Fashion-MNIST, batches drawn as amp_ddp draws
# them) and number of steps, measured in the same run; then the step's FLOP rate against oneDNN's
# bare matmul rate on the same shapes (bench_step). Prints the machine, the BLAS PyTorch actually
# called, both sides' mean training loss, and Markdown tables; no ratio unless the peer ran
# OpenBLAS and its loss lies within [0.5x, 2x] of amp_ddp's.
# Usage: scripts/bench_train.sh [steps (default 300)] [batch (default 128)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
batch=${2:-128}
bin=${AMP_BUILD:-build}
source scripts/peer_env.sh
peer() { run_peer torch_mlp.py "$1" --precision "$2" --batch "$batch" --steps $((steps - 20)); }  # + 20 untimed
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
     "$(grep -o -w 'avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | xargs | sed 's/^$/no AVX-512/')"
probe=$(peer 1 fp32)
blas=$(describe_peer "$probe")
echo "peer: PyTorch called $blas"
declare -A peer_fp32
honest=1
case "$blas" in
  *openblas*OpenBLAS*) ;;
  *) honest=0; echo "bench_train: PyTorch did not run OpenBLAS: no ratios are printed (a handicapped peer is no result)" >&2 ;;
esac
echo
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| precision | threads | amp_ddp samples/s | PyTorch samples/s | ratio | loss amp_ddp / PyTorch |"
echo "|---|---|---|---|---|---|"
for threads in 1 2; do
  for prec in fp32 fp16 bf16; do
    "$bin/amp_ddp" configs/fmnist_mlp_$prec.yaml --set run.steps="$steps" --set run.log_interval="$steps" \
        --set run.threads="$threads" --set data.batch_size="$batch" --set data.eval_images='""' \
        --set data.eval_labels='""' --set checkpoint.final=false --set run.progress=off \
        --set run.out_dir="$out/${prec}_$threads" > /dev/null
    read -r ours ours_loss < <(/usr/bin/python3 -c "import json;s=json.load(open('$out/${prec}_$threads/summary.json'));print(round(s['samples_per_second']), s['final_loss'])")
    if [ "$prec" = fp16 ]; then
      echo "| $prec | $threads | $ours | (no FP16 autocast on CPU) | | $(printf %.4f "$ours_loss") |"
      continue
    fi
    pj=$(peer "$threads" "$prec")
    read -r peer peer_loss < <(/usr/bin/python3 -c "import json,sys;j=json.loads(sys.argv[1]);print(round(j['samples_per_second']), j['loss_mean'])" "$pj")
    loss_ok=$(peer_loss_ok "$pj" "$ours_loss")
    ratio="(no ratio)"
    ((honest)) && [ "$loss_ok" = ok ] && ratio=$(/usr/bin/python3 -c "print(f'{$ours/$peer:.2f}')")
    [ "$loss_ok" = ok ] || echo "bench_train: $prec $threads threads: $loss_ok: no ratio" >&2
    # The peer at its best: where its BF16 autocast is slower than its FP32 (no fast BF16 kernel on
    # the CPU), its FP32 is its way to train this model, so BF16 is compared with the faster one.
    if [ "$prec" = bf16 ] && ((honest)) && [ "$loss_ok" = ok ] && [ -n "${peer_fp32[$threads]:-}" ]; then
      ratio="$ratio ($(/usr/bin/python3 -c "print(f'{$ours/max($peer, ${peer_fp32[$threads]}):.2f}')") vs its faster precision)"
    fi
    [ "$prec" = fp32 ] && [ "$loss_ok" = ok ] && peer_fp32[$threads]=$peer
    echo "| $prec | $threads | $ours | $peer | $ratio | $(printf %.4f "$ours_loss") / $(printf %.4f "$peer_loss") |"
  done
done
echo
for threads in 1 2; do
  for prec in fp32 fp16 bf16; do
    echo "bench_step --precision $prec --threads $threads --batch $batch:"
    "$bin/bench/bench_step" --precision "$prec" --threads "$threads" --batch "$batch" | tail -1
  done
done
