#!/usr/bin/env bash
# Explicit against fused attention (model.attention) in one GPT layer of the nanoGPT character
# model's width (384, 6 heads of 64) at contexts 64 .. 1024, the same tokens per step (2048: batch
# 2048 / T), measured in the same run by bench_gpt_step (its per-op timing). Prints a Markdown
# table: the attention ops' time per step (the explicit path's batched GEMMs and causal softmax;
# the fused op's forward and backward), the whole step, the ratio explicit / fused (above 1: the
# fused op is faster) and the activation bytes of each.
# With repeats > 1 the two paths run alternately that many times and each cell is the median (this
# shared VM's speed drifts by tens of percent between runs a minute apart).
# Usage: scripts/bench_attention.sh [precision (fp32)] [threads (1)] [steps (5)] [repeats (1)] [fused (fused)]
# (fused: `fused`, the op as the trainer runs it, or `exact`, the CPU's specification kernels where
# the trainer would run BF16 with P and dS rounded, on the matmul or the kernels' BF16 products:
# bench_gpt_step --attention)
set -euo pipefail
cd "$(dirname "$0")/.."
prec=${1:-fp32}
threads=${2:-1}
steps=${3:-5}
repeats=${4:-1}
fused=${5:-fused}
bin=${AMP_BUILD:-build}/bench/bench_gpt_step
[ -x "$bin" ] || { echo "bench_attention: $bin missing (configure with -DAMP_BUILD_BENCH=ON)" >&2; exit 2; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
     "$(grep -o -w 'avx512f\|avx512_bf16' /proc/cpuinfo | sort -u | xargs | sed 's/^$/no AVX-512/')"
echo "1 layer x 384, 6 heads, $prec, $threads thread(s), 2048 tokens per step, mean of $steps steps," \
     "median of $repeats alternating run(s) per path; fused: bench_gpt_step --attention $fused"
echo
echo "| T | batch | explicit attention ms | fused attention ms | ratio | explicit step ms | fused step ms | activations explicit / fused MiB |"
echo "|---|---|---|---|---|---|---|---|"
# Sum of the attention ops' times in one bench_gpt_step output, then the step time, then the activations.
attn_ms() { awk '/^  (gemm_batched|causal_softmax_forward|causal_softmax_backward|attention_forward|attention_backward) /{s+=$2} END{printf "%.1f", s}'; }
step_ms() { awk '/^  step /{printf "%.1f", $2}'; }
act_mib() { sed -n 's/.*activations \([0-9.]*\) MiB.*/\1/p'; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END{printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for T in 64 128 256 512 1024; do
  B=$((2048 / T))
  run() { "$bin" --layers 1 --embd 384 --heads 6 --seq "$T" --vocab 65 --batch "$B" --threads "$threads" \
                 --precision "$prec" --steps "$steps" --rounds 1 --attention "$1"; }
  ea=() fa=() es=() fs=() em="" fm=""
  for ((k = 0; k < repeats; ++k)); do
    e=$(run explicit)
    f=$(run "$fused")
    ea+=("$(attn_ms <<<"$e")") fa+=("$(attn_ms <<<"$f")") es+=("$(step_ms <<<"$e")") fs+=("$(step_ms <<<"$f")")
    em=$(act_mib <<<"$e") fm=$(act_mib <<<"$f")
  done
  me=$(median "${ea[@]}") mf=$(median "${fa[@]}")
  echo "| $T | $B | $me | $mf | $(awk -v a="$me" -v b="$mf" 'BEGIN{printf "%.2f", a / b}') | $(median "${es[@]}") |" \
       "$(median "${fs[@]}") | $em / $fm |"
done
