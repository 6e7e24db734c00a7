#!/usr/bin/env bash
# Runs configs/fmnist_fp16_underflow.yaml as FP32, FP16 without scaling and FP16 with dynamic
# scaling, then prints accuracy and the share of zero / subnormal FP16 gradients per layer.
# Usage: scripts/underflow_demo.sh [extra --set arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${AMP_BIN:-build/amp_ddp}
out=runs/underflow_demo
extra=("$@")
for variant in "fp32 none" "fp16 none" "fp16 dynamic"; do
  read -r prec mode <<< "$variant"
  "$bin" configs/fmnist_fp16_underflow.yaml --set precision.compute="$prec" --set precision.loss_scale.mode="$mode" \
      --set run.out_dir="$out/${prec}_$mode" --set run.progress=off "${extra[@]}" > /dev/null
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("| run | eval accuracy | final scale | zero / subnormal share of 16-bit gradients (fc1, fc2, fc3 weights, last telemetry step) |")
print("|---|---|---|---|")
for name in ("fp32_none", "fp16_none", "fp16_dynamic"):
    s = json.load(open(f"{out}/{name}/summary.json"))
    tel = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if "telemetry" in l][-1]["telemetry"]
    fr = ", ".join(f"{v['zero_frac']:.2f} / {v['subnormal_frac']:.2f}" for k, v in tel.items() if k.endswith("weight"))
    label = {"fp32_none": "FP32", "fp16_none": "FP16, no loss scaling", "fp16_dynamic": "FP16, dynamic loss scaling"}[name]
    print(f"| {label} | {100 * s['eval_accuracy']:.2f}% | {s['final_scale']:g} | {fr} |")
PY
