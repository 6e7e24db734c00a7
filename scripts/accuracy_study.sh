#!/usr/bin/env bash
# Fashion-MNIST accuracy of FP32, FP16 (dynamic scaling) and BF16 over several seeds, same
# hyperparameters (configs/fmnist_mlp_*.yaml, 15 epochs), printed as a Markdown table.
# Usage: scripts/accuracy_study.sh [seeds (default "1 2 3")] [threads per run (default 1)]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-"1 2 3"}
threads=${2:-1}
out=runs/accuracy_study
mkdir -p "$out"
for prec in fp32 fp16 bf16; do
  for s in $seeds; do
    d="$out/${prec}_seed$s"
    [ -f "$d/summary.json" ] || "${AMP_BIN:-build/amp_ddp}" "configs/fmnist_mlp_$prec.yaml" --set run.seed="$s" \
        --set run.threads="$threads" --set run.out_dir="$d" --set run.progress=off >/dev/null
  done
done
python3 - "$out" "$seeds" <<'PY'
import json, sys, statistics
out, seeds = sys.argv[1], sys.argv[2].split()
print("| precision | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | vs fp32 | skipped steps | final scale | samples/s |")
print("|---|" + "---|" * (len(seeds) + 5))
ref = None
for prec in ("fp32", "fp16", "bf16"):
    sums = [json.load(open(f"{out}/{prec}_seed{s}/summary.json")) for s in seeds]
    acc = [100 * x["eval_accuracy"] for x in sums]
    mean = statistics.mean(acc)
    ref = mean if ref is None else ref
    print(f"| {prec} | " + " | ".join(f"{a:.2f}" for a in acc) + f" | {mean:.2f} | {mean - ref:+.2f} | "
          f"{'/'.join(str(x['skipped_steps']) for x in sums)} | {'/'.join(format(x['final_scale'], 'g') for x in sums)} | "
          f"{statistics.mean(x['samples_per_second'] for x in sums):.0f} |")
PY
