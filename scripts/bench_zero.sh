#!/usr/bin/env bash
# ZeRO stage 1 (distributed.zero) on this machine:
#  1. training-state bytes per rank (masters, moments, working copy, gradients) at 1, 2 and 4 ranks
#     with zero 0 and 1, as the program counts them (summary.json state_bytes_per_rank);
#  2. step time with zero 1 against zero 0 at 2 ranks for the MLP and the GPT, in the same run
#     (runs alternate; the median of R each; train_seconds excludes evaluation);
#  3. the largest GPT (n_layer x n_embd, GPT-2 vocabulary and context) whose training state fits a
#     per-rank budget with zero 0 and 1, from the byte counts (the formula is first checked against
#     the program's own count for the shipped GPT).
# Usage: scripts/bench_zero.sh [repeats (default 3)] [budget GiB per rank (default 80)] [ranks (default 8)]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
budget=${2:-80}
nodes_ranks=${3:-8}
bin=${AMP_BUILD:-build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
py=/usr/bin/python3
common=(--set checkpoint.final=false --set run.progress=off --set run.eval_interval=0 --set sample.tokens=0)
field() { $py -c "import json,sys; d=json.load(open('$1/summary.json')); print(eval(sys.argv[1], {}, d))" "$2"; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
echo
echo "### Training state per rank (bytes; \`run.steps=1\`)"
echo
echo "| model | ranks | zero | masters | moments | working copy | gradients | total | masters+moments per parameter |"
echo "|---|---|---|---|---|---|---|---|---|"
for model in fmnist_mlp_fp16 gpt_fortunes_fp16; do
  for np in 1 2 4; do
    for z in 0 1; do
      d="$out/bytes_${model}_${np}_$z"
      scripts/mpirun.sh -np "$np" "$bin/amp_ddp" "configs/$model.yaml" --set run.steps=1 --set run.out_dir="$d" \
          --set distributed.zero="$z" "${common[@]}" > /dev/null
      $py - "$d" "$model" "$np" "$z" <<'PY'
import json, sys
d, model, np, z = sys.argv[1:]
s = json.load(open(d + "/summary.json"))
b = s["state_bytes_per_rank"]
per = (b["masters"] + b["moments"]) / s["params"]
print(f"| {model} | {np} | {z} | {b['masters']:,} | {b['moments']:,} | {b['working_copy']:,} | {b['gradients']:,} | {b['total']:,} | {per:.2f} |")
PY
    done
  done
done
echo
echo "### Step time at 2 ranks, zero 1 against zero 0 (median of $reps alternating runs each)"
echo
echo "| model | steps | zero 0 s/step | zero 1 s/step | zero 1 / zero 0 |"
echo "|---|---|---|---|---|"
for spec in "fmnist_mlp_fp16 200" "gpt_fortunes_fp16 30"; do
  set -- $spec
  model=$1 steps=$2
  t0=() t1=()
  for ((r = 0; r < reps; ++r)); do
    for z in 0 1; do
      d="$out/time_${model}_${z}_$r"
      scripts/mpirun.sh -np 2 "$bin/amp_ddp" "configs/$model.yaml" --set run.steps="$steps" --set run.log_interval="$steps" \
          --set run.out_dir="$d" --set distributed.zero="$z" "${common[@]}" > /dev/null
      t=$(field "$d" "train_seconds / steps")
      if [ "$z" = 0 ]; then t0+=("$t"); else t1+=("$t"); fi
    done
  done
  $py - "$model" "$steps" "${t0[*]}" "${t1[*]}" <<'PY'
import statistics, sys
model, steps, a, b = sys.argv[1:]
a = statistics.median(map(float, a.split())); b = statistics.median(map(float, b.split()))
print(f"| {model} | {steps} | {a*1e3:.1f} ms | {b*1e3:.1f} ms | {b/a:.3f} |")
PY
done
echo
echo "### The largest GPT whose training state fits $budget GiB per rank ($nodes_ranks ranks; vocabulary 50257, context 1024; activations not counted)"
echo
gd="$out/bytes_gpt_fortunes_fp16_2_1"
$py - "$gd" "$budget" "$nodes_ranks" <<'PY'
import json, sys
d, budget, N = sys.argv[1], float(sys.argv[2]) * 2**30, int(sys.argv[3])

def params(L, C, V, T):  # the layout of src/model/gpt.cpp: tied embedding, pre-LN blocks
    per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C)
    return V * C + T * C + L * per_layer + 2 * C

def state_bytes(P, zero, n, es=2):
    # masters 4, moments 8, FP32 unscaled gradients 4 (held: all or 1/n), working copy and 16-bit
    # gradients es each (whole), the reduced 16-bit shard es/n (sharded only)
    held = P / n if zero else P
    return 16 * held + 2 * es * P + (es * P / n if zero else 0)

# Check the formula against the program's count for the shipped GPT (2 ranks, zero 1).
s = json.load(open(d + "/summary.json"))
b = s["state_bytes_per_rank"]["total"]
P = params(4, 128, 256, 64)
pred = state_bytes(P, 1, 2)
print(f"formula check: the shipped GPT has {s['params']:,} parameters (formula {P:,}); the program counts {b:,} "
      f"state bytes per rank at 2 ranks with zero 1, the formula {pred:,.0f}" +
      (" (equal)" if abs(pred - b) < 1 else " (the difference is the layout's and the shards' padding)"))
print()
print("| n_embd | zero 0: n_layer | zero 0: parameters | zero 1: n_layer | zero 1: parameters | zero 1 / zero 0 |")
print("|---|---|---|---|---|---|")
for C in (768, 1024, 1600, 2048, 4096, 8192):
    best = []
    for zero in (0, 1):
        L = 0
        while state_bytes(params(L + 1, C, 50257, 1024), zero, N) <= budget:
            L += 1
        best.append((L, params(L, C, 50257, 1024)))
    ratio = f"{best[1][1] / best[0][1]:.2f}" if best[0][0] > 0 else "-"
    print(f"| {C} | {best[0][0]} | {best[0][1]/1e9:.2f} B | {best[1][0]} | {best[1][1]/1e9:.2f} B | {ratio} |")
print()
print(f"bytes per parameter: zero 0: 20; zero 1 on {N} ranks: {state_bytes(1, 1, N):.2f} (16/N + 4 + 2/N)")
PY
