#!/usr/bin/env bash
# Token shards at scale: makes GB of random llm.c token shards (uint16, vocabulary 65536), then
#   1. bench_token_stream: a batch of windows read from the shards vs from memory, and the
#      resident memory after mapping, a full scan and the reads;
#   2. amp_ddp on 2 ranks, a small GPT for a few steps, once on a small shard set and once on the
#      large one: each rank's peak resident memory (the growth is what the shards cost a rank) and
#      the step time, against which the batch read time is the data loading's share.
# Usage: scripts/bench_shards.sh [GB] [folder]   (default 2 GB in a temporary folder, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
gb=${1:-2}
dir=${2:-$(mktemp -d)}
keep=${2:+1}
trap '[ -z "$keep" ] && rm -rf "$dir"' EXIT
mkdir -p "$dir/big" "$dir/small"
python3 - "$dir" "$gb" <<'PY'
import os, struct, sys
d, gb = sys.argv[1], float(sys.argv[2])
def shard(path, n):
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, n) + bytes(1012))
        left = 2 * n
        while left:
            k = min(left, 1 << 26)
            f.write(os.urandom(k))
            left -= k
per = 1 << 27  # tokens per shard: 256 MiB
count = max(1, int(gb * 1e9 / 2 / per + 0.5))
for i in range(count):
    shard(os.path.join(d, "big", f"train_{i:03d}.bin"), per)
shard(os.path.join(d, "small", "train_000.bin"), 1 << 22)
shard(os.path.join(d, "val_000.bin"), 1 << 16)
PY
echo "== shards: $(du -sh "$dir/big" | cut -f1) in $dir/big, $(du -sh "$dir/small" | cut -f1) in $dir/small"
build/bench/bench_token_stream "$dir"/big/*.bin | tee "$dir/bench.txt"
# Peak resident memory of each rank (KiB, getrusage of the rank process).
cat > "$dir/peak.py" <<'PY'
import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL).returncode
with open(sys.argv[1] + "." + __import__("os").environ.get("OMPI_COMM_WORLD_RANK", "0"), "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(rc)
PY
for set in small big; do
  out="$dir/run_$set"
  mpirun --allow-run-as-root --oversubscribe -np 2 python3 "$dir/peak.py" "$dir/peak_$set" build/amp_ddp \
    configs/gpt_fortunes_fp16.yaml --set data.format=tokens --set "data.train_tokens=[\"$dir/$set/*.bin\"]" \
    --set "data.eval_tokens=[\"$dir/val_000.bin\"]" --set data.text_files=[] --set data.eval_fraction=0 --set model.vocab_size=65536 \
    --set run.steps=30 --set run.log_interval=10 --set run.eval_interval=0 --set sample.tokens=0 \
    --set data.eval_batch_size=16 --set checkpoint.final=false --set run.progress=off --set "run.out_dir=$out"
  python3 - "$dir" "$set" "$out" <<'PY'
import json, sys
d, s, out = sys.argv[1:]
peaks = [int(open(f"{d}/peak_{s}.{r}").read()) / 1024 for r in (0, 1)]
sm = json.load(open(f"{out}/summary.json"))
step_ms = sm["train_seconds"] / sm["steps"] * 1e3
print(f"amp_ddp on {s} shards: peak resident memory rank 0 {peaks[0]:.0f} MiB, rank 1 {peaks[1]:.0f} MiB; "
      f"{step_ms:.1f} ms per step ({sm.get('tokens_per_second', 0):.0f} tokens/s)")
open(f"{d}/step_{s}", "w").write(f"{step_ms} {peaks[0]} {peaks[1]}")
PY
done
python3 - "$dir" <<'PY'
import sys
d = sys.argv[1]
small = [float(x) for x in open(f"{d}/step_small").read().split()]
big = [float(x) for x in open(f"{d}/step_big").read().split()]
import re
us = float(re.search(r"shards ([0-9.]+) us", open(f"{d}/bench.txt").read()).group(1))
print(f"resident memory growth from the small to the large shard set: rank 0 {big[1] - small[1]:+.0f} MiB, "
      f"rank 1 {big[2] - small[2]:+.0f} MiB")
print(f"data loading: {us:.1f} us per batch of a rank = {100 * us / 1e3 / big[0]:.3f}% of its {big[0]:.1f} ms step")
PY
