#!/usr/bin/env bash
# GPT training throughput at two realistic shapes, against the bare GEMM rate and against PyTorch:
#   char  nanoGPT's Shakespeare-character model: 6 layers x 384, 6 heads, context 256, batch 8
#   gpt2  GPT-2 small's layer shape: 2 layers x 768, 12 heads, context 1024, batch 2
# (byte vocabulary, the fortunes text of configs/gpt_fortunes_*.yaml, AdamW). Per shape, precision
# (fp32, bf16) and thread count (1, 2): amp_ddp's tokens/s with explicit and fused attention
# (`amp_ddp` on the config with the shape's --set overrides), the PyTorch peer's
# (bench/peers/torch_gpt.py on the same text, windows and steps, OpenBLAS for FP32 and oneDNN
# through BF16 autocast, run at its best by scripts/peer_env.sh), the ratio against the peer's
# faster precision, and the step/bare-GEMM ratios of bench_gpt_step with each attention path (the
# bare GEMMs are the explicit path's in both: the fused step is compared with them by time). No
# ratio when the peer did not run OpenBLAS or its mean loss lies outside [0.5x, 2x] of amp_ddp's.
# Prints Markdown tables.
# Usage: scripts/bench_gpt_shapes.sh [steps (default 20)] [shapes (default "char gpt2")]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
shapes=${2:-char gpt2}
bin=${AMP_BUILD:-build}
[ -x "$bin/bench/bench_gpt_step" ] || { echo "bench_gpt_shapes: $bin/bench/bench_gpt_step missing (-DAMP_BUILD_BENCH=ON)" >&2; exit 2; }
source scripts/peer_env.sh
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
     "$(grep -o -w 'avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | xargs | sed 's/^$/no AVX-512/')"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
shape_args() {  # layers heads embd seq batch
  case $1 in
    char) echo "6 6 384 256 8" ;;
    gpt2) echo "2 12 768 1024 2" ;;
    *) echo "bench_gpt_shapes: unknown shape $1" >&2; exit 2 ;;
  esac
}
for shape in $shapes; do
  read -r L H C T B < <(shape_args "$shape")
  probe=$(run_peer torch_gpt.py 1 --precision fp32 --batch "$B" --seq "$T" --layers "$L" --heads "$H" --embd "$C" --steps 2)
  blas=$(describe_peer "$probe")
  honest=1
  case "$blas" in *openblas*OpenBLAS*) ;; *) honest=0; echo "bench_gpt_shapes: the peer did not run OpenBLAS: no ratios" >&2 ;; esac
  echo
  echo "### $shape: $L layers x $C, $H heads, context $T, batch $B, $steps steps"
  echo "peer: PyTorch called $blas"
  echo
  echo "| precision | threads | amp_ddp explicit tokens/s | amp_ddp fused tokens/s | PyTorch tokens/s | best amp_ddp / PyTorch's faster precision | step/bare GEMM explicit / fused | loss amp_ddp / PyTorch |"
  echo "|---|---|---|---|---|---|---|---|"
  declare -A peer_tps=()
  for threads in 1 2; do
    for prec in fp32 bf16; do
      declare -A tps=()
      for att in explicit fused; do
        d="$out/${shape}_${prec}_${threads}_$att"
        "$bin/amp_ddp" "configs/gpt_fortunes_$prec.yaml" --set model.n_layer="$L" --set model.n_head="$H" \
            --set model.n_embd="$C" --set model.seq_len="$T" --set data.batch_size="$B" --set model.attention="$att" \
            --set run.steps="$steps" --set run.log_interval="$steps" --set run.threads="$threads" \
            --set run.eval_interval=0 --set data.eval_fraction=0 --set sample.tokens=0 --set run.sample_interval=0 \
            --set checkpoint.final=false --set run.progress=off --set run.out_dir="$d" > /dev/null
        read -r t l < <(/usr/bin/python3 -c "import json;s=json.load(open('$d/summary.json'));print(round(s['samples_per_second'] * $T), s['final_loss'])")
        tps[$att]=$t
        loss=$l
      done
      pj=$(run_peer torch_gpt.py "$threads" --precision "$prec" --batch "$B" --seq "$T" --layers "$L" --heads "$H" \
           --embd "$C" --steps $((steps - 5)))
      read -r theirs peer_loss < <(/usr/bin/python3 -c "import json,sys;j=json.loads(sys.argv[1]);print(round(j['tokens_per_second']), j['loss_mean'])" "$pj")
      peer_tps[$prec$threads]=$theirs
      loss_ok=$(peer_loss_ok "$pj" "$loss")
      [ "$loss_ok" = ok ] || echo "bench_gpt_shapes: $shape $prec $threads threads: $loss_ok: no ratio" >&2
      ratio="(no ratio)"
      if ((honest)) && [ "$loss_ok" = ok ]; then
        best_peer=$theirs
        [ "$prec" = bf16 ] && best_peer=$(( theirs > ${peer_tps[fp32$threads]:-0} ? theirs : ${peer_tps[fp32$threads]:-0} ))
        ratio=$(/usr/bin/python3 -c "print(f'{max(${tps[explicit]}, ${tps[fused]}) / $best_peer:.2f}')")
      fi
      bare=""
      for att in explicit fused; do
        r=$("$bin/bench/bench_gpt_step" --layers "$L" --embd "$C" --heads "$H" --seq "$T" --vocab 256 --batch "$B" \
            --threads "$threads" --precision "$prec" --steps 3 --rounds 3 --attention "$att" |
            sed -n 's/.*| median \([0-9.]*\).*/\1/p')
        bare="$bare${bare:+ / }$r"
      done
      echo "| $prec | $threads | ${tps[explicit]} | ${tps[fused]} | $theirs | $ratio | $bare | $(printf %.4f "$loss") / $(printf %.4f "$peer_loss") |"
    done
  done
done
