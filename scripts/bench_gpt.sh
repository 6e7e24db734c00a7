#!/usr/bin/env bash
# Training throughput of the GPT of configs/gpt_fortunes_*.yaml (4 layers x 128, 4 heads, context
# 64, byte vocabulary, batch 16, AdamW) in FP32/FP16/BF16 with 1 and 2 threads, next to a PyTorch
# nanoGPT-style peer with the same shapes (bench/peers/torch_gpt.py, OpenBLAS, FP32 and BF16
# autocast) on the same text, windows and number of steps, measured in the same run. Prints the
# machine, the BLAS the peer called, both sides' mean training loss, and a Markdown table of
# tokens/s; no ratio unless the peer ran OpenBLAS and its loss lies within [0.5x, 2x] of amp_ddp's.
# Usage: scripts/bench_gpt.sh [steps (default 100)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-100}
bin=${AMP_BUILD:-build}
source scripts/peer_env.sh
peer() { run_peer torch_gpt.py "$1" --precision "$2" --batch 16 --steps $((steps - 5)); }  # + 5 untimed
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
     "$(grep -o -w 'avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | xargs | sed 's/^$/no AVX-512/')"
probe=$(peer 1 fp32)
blas=$(describe_peer "$probe")
echo "peer: PyTorch called $blas"
honest=1
case "$blas" in
  *openblas*OpenBLAS*) ;;
  *) honest=0; echo "bench_gpt: PyTorch did not run OpenBLAS: no ratios are printed" >&2 ;;
esac
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo
echo "| precision | threads | amp_ddp tokens/s | PyTorch tokens/s | ratio | loss amp_ddp / PyTorch |"
echo "|---|---|---|---|---|---|"
declare -A peer_fp32
for threads in 1 2; do
  for prec in fp32 fp16 bf16; do
    "$bin/amp_ddp" configs/gpt_fortunes_$prec.yaml --set run.steps="$steps" --set run.log_interval="$steps" \
        --set run.threads="$threads" --set run.eval_interval=0 --set data.eval_fraction=0 --set sample.tokens=0 \
        --set run.sample_interval=0 --set checkpoint.final=false --set run.progress=off \
        --set run.out_dir="$out/${prec}_$threads" > /dev/null
    read -r ours ours_loss < <(/usr/bin/python3 -c "import json;s=json.load(open('$out/${prec}_$threads/summary.json'));print(round(s['samples_per_second'] * 64), s['final_loss'])")
    if [ "$prec" = fp16 ]; then
      echo "| $prec | $threads | $ours | (no FP16 autocast on CPU) | | $(printf %.4f "$ours_loss") |"
      continue
    fi
    pj=$(peer "$threads" "$prec")
    read -r theirs peer_loss < <(/usr/bin/python3 -c "import json,sys;j=json.loads(sys.argv[1]);print(round(j['tokens_per_second']), j['loss_mean'])" "$pj")
    loss_ok=$(peer_loss_ok "$pj" "$ours_loss")
    [ "$loss_ok" = ok ] || echo "bench_gpt: $prec $threads threads: $loss_ok: no ratio" >&2
    [ "$prec" = fp32 ] && [ "$loss_ok" = ok ] && peer_fp32[$threads]=$theirs
    ratio="(no ratio)"
    if ((honest)) && [ "$loss_ok" = ok ]; then
      ratio=$(/usr/bin/python3 -c "print(f'{$ours/$theirs:.2f}')")
      [ "$prec" = bf16 ] && [ -n "${peer_fp32[$threads]:-}" ] &&
        ratio="$ratio ($(/usr/bin/python3 -c "print(f'{$ours/max($theirs, ${peer_fp32[$threads]}):.2f}')") vs its faster precision)"
    fi
    echo "| $prec | $threads | $ours | $theirs | $ratio | $(printf %.4f "$ours_loss") / $(printf %.4f "$peer_loss") |"
  done
done
