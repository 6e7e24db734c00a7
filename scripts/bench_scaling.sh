#!/usr/bin/env bash
# Weak scaling of a training step on this machine: 1 rank vs 2 ranks, one thread each, the same
# batch per rank (so 2 ranks do twice the work per step). Efficiency = t1 / t2 (step times); the
# hidden share is the part of the all-reduce time that overlapped backward (summary.json).
# Usage: scripts/bench_scaling.sh [steps (default 400)] [precision (default fp16)] [batch per rank (default 128)]
#        [extra amp_ddp arguments, e.g. --set distributed.overlap=on]
# AMP_BENCH_MODEL=gpt measures the GPT of configs/gpt_fortunes_<precision>.yaml instead of the MLP
# (batch per rank in windows of model.seq_len tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-400}
prec=${2:-fp16}
batch=${3:-128}
shift $(( $# < 3 ? $# : 3 ))
bin=${AMP_BUILD:-build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--set run.steps="$steps" --set run.log_interval="$steps" --set run.threads=1 --set data.batch_size="$batch"
        --set checkpoint.final=false --set run.progress=off)
if [ "${AMP_BENCH_MODEL:-mlp}" = gpt ]; then
  config=configs/gpt_fortunes_$prec.yaml
  common+=(--set run.eval_interval="$steps" --set sample.tokens=0)
else
  config=configs/fmnist_mlp_$prec.yaml
  common+=(--set data.eval_images='""' --set data.eval_labels='""')
fi
for np in 1 2; do
  OMP_NUM_THREADS=1 scripts/mpirun.sh -np "$np" "$bin/amp_ddp" "$config" "${common[@]}" \
      --set run.out_dir="$out/np$np" "$@" > /dev/null
done
python3 - "$out" "$prec" "$batch" "$config" <<'PY'
import json, sys
out, prec, batch, config = sys.argv[1:5]
s1, s2 = (json.load(open(f"{out}/np{n}/summary.json")) for n in (1, 2))
t1, t2 = s1["train_seconds"] / s1["steps"], s2["train_seconds"] / s2["steps"]
moved = s2.get("allreduce_bytes_per_step", s2.get("reduce_scatter_bytes_per_step"))
comm = s2["comm_seconds_per_step"]
print(f"| config | precision | batch/rank | 1 rank step (ms) | 2 ranks step (ms) | efficiency t1/t2 | gradient bytes/step | comm (ms/step) | comm share of the step | exposed (ms/step) | hidden share |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
print(f"| {config} | {prec} | {batch} | {t1*1e3:.2f} | {t2*1e3:.2f} | {t1/t2:.3f} | {moved} | "
      f"{comm*1e3:.3f} | {comm/t2:.3f} | {s2['comm_exposed_seconds_per_step']*1e3:.3f} | {s2['comm_hidden_share']:.2f} |")
PY
