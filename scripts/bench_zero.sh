#!/usr/bin/env bash
# ZeRO stages 1 and 2 (distributed.zero) on this machine:
#  1. training-state bytes per rank (masters, moments, working copy, gradients) at 1, 2 and 4 ranks
#     with zero 0, 1 and 2, as the program counts them (summary.json state_bytes_per_rank), and
#     rank 0's measured peak resident memory;
#  2. step time with zero 1 and 2 against zero 0 at 2 ranks for the MLP and the GPT, in the same run
#     (runs alternate; the median of R each; train_seconds excludes evaluation).
# Usage: scripts/bench_zero.sh [repeats (default 3)]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
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
echo "| model | ranks | zero | masters | moments | working copy | gradients | total | masters+moments per parameter | peak resident (rank 0) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for model in fmnist_mlp_fp16 gpt_fortunes_fp16; do
  for np in 1 2 4; do
    for z in 0 1 2; do
      d="$out/bytes_${model}_${np}_$z"
      scripts/mpirun.sh -np "$np" "$bin/amp_ddp" "configs/$model.yaml" --set run.steps=1 --set run.out_dir="$d" \
          --set distributed.zero="$z" "${common[@]}" > /dev/null
      $py - "$d" "$model" "$np" "$z" <<'PY'
import json, sys
d, model, np, z = sys.argv[1:]
s = json.load(open(d + "/summary.json"))
b = s["state_bytes_per_rank"]
per = (b["masters"] + b["moments"]) / s["params"]
peak = s.get("peak_resident_bytes_rank0")
print(f"| {model} | {np} | {z} | {b['masters']:,} | {b['moments']:,} | {b['working_copy']:,} | {b['gradients']:,} | {b['total']:,} | {per:.2f} | "
      + (f"{peak / 2**20:.1f} MiB |" if peak else "- |"))
PY
    done
  done
done
echo
echo "### Step time at 2 ranks, zero 1 and 2 against zero 0 (median of $reps alternating runs each)"
echo
echo "| model | steps | zero 0 s/step | zero 1 s/step | zero 2 s/step | zero 1 / zero 0 | zero 2 / zero 0 |"
echo "|---|---|---|---|---|---|---|"
for spec in "fmnist_mlp_fp16 200" "gpt_fortunes_fp16 30"; do
  set -- $spec
  model=$1 steps=$2
  t0=() t1=() t2=()
  for ((r = 0; r < reps; ++r)); do
    for z in 0 1 2; do
      d="$out/time_${model}_${z}_$r"
      scripts/mpirun.sh -np 2 "$bin/amp_ddp" "configs/$model.yaml" --set run.steps="$steps" --set run.log_interval="$steps" \
          --set run.out_dir="$d" --set distributed.zero="$z" "${common[@]}" > /dev/null
      t=$(field "$d" "train_seconds / steps")
      case $z in 0) t0+=("$t") ;; 1) t1+=("$t") ;; 2) t2+=("$t") ;; esac
    done
  done
  $py - "$model" "$steps" "${t0[*]}" "${t1[*]}" "${t2[*]}" <<'PY'
import statistics, sys
model, steps, a, b, c = sys.argv[1:]
a, b, c = (statistics.median(map(float, x.split())) for x in (a, b, c))
print(f"| {model} | {steps} | {a*1e3:.1f} ms | {b*1e3:.1f} ms | {c*1e3:.1f} ms | {b/a:.3f} | {c/a:.3f} |")
PY
done
echo
echo "(The largest GPT that fits a per-rank budget, by the program's own count: scripts/plan_largest_gpt.sh.)"
