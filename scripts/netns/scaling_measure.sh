#!/usr/bin/env bash
# Measures communication and step time across the two namespace "nodes" of up.sh at several link
# rates (tc tbf on the veth pair), for scripts/scaling_model.py to fit and check against:
#   - TCP goodput of one stream over the link (tcp_goodput.py) at every rate;
#   - MPI_Allreduce time vs message size (allreduce_time.cpp, compiled here with mpicxx) for
#     2 nodes x 2 ranks (Open MPI's own algorithm choice, and the ring algorithm forced) and
#     2 nodes x 1 rank at every rate, and 1 node x 2 / x 4 ranks once (shared memory: the link
#     plays no part);
#   - amp_ddp training step time of AMP_MEASURE_CONFIG (default: the MLP 784-1024-1024-10, fp16,
#     batch 128 per rank; configs/gpt_fortunes_fp16.yaml for the GPT) for 1 node x 1 rank (compute
#     only, once), and 1 node x 2, 2 nodes x 1, 2 nodes x 2 ranks at every rate: summary.json's
#     model, train_seconds/steps, comm_seconds_per_step, exposed comm.
# Then runs scripts/scaling_model.py on the results (fit, predicted vs measured, projections).
#
#   scripts/netns/scaling_measure.sh [OUT_DIR]     (default runs/netns_scaling)
#
# Environment:
#   AMP_BIN              amp_ddp binary (default build/amp_ddp)
#   AMP_NETNS_BUILD      where allreduce_time is compiled (default build/netns)
#   AMP_MEASURE_RATES    link rates (default "none 1gbit 200mbit"; none = unlimited veth)
#   AMP_MEASURE_SIZES    all-reduce sizes in bytes (default 4 KiB .. 4 MiB, x4 apart)
#   AMP_MEASURE_BUDGET   seconds per all-reduce size (default 1; at most 50 iterations)
#   AMP_MEASURE_CONFIG   training config (default configs/fmnist_mlp_fp16.yaml; the GPT:
#                        configs/gpt_fortunes_fp16.yaml)
#   AMP_MEASURE_STEPS    training steps per run (default 60)
#   AMP_MEASURE_LAYOUTS  NODESxRANKS layouts trained at every rate (default "1x2 2x1 2x2")
#   AMP_MEASURE_TCP_MB   MiB sent for the TCP goodput (default 24; x8 unlimited)
#   AMP_NETNS_PREFIX, AMP_NETNS_SUBNET (common.sh). The namespaces are made (and removed at the
#   end) when they are not up already. Every rank runs 1 CPU thread (run.threads=1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=common.sh
source "$here/common.sh"
out=${1:-runs/netns_scaling}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=${AMP_BIN:-$root/build/amp_ddp}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
[[ -x "$bin" ]] || { echo "scaling_measure: no amp_ddp at $bin (set AMP_BIN)" >&2; exit 1; }
cfg=${AMP_MEASURE_CONFIG:-$root/configs/fmnist_mlp_fp16.yaml}
steps=${AMP_MEASURE_STEPS:-60}
rates=${AMP_MEASURE_RATES:-none 1gbit 200mbit}
sizes=${AMP_MEASURE_SIZES:-4096 16384 65536 262144 1048576 4194304}
layouts=${AMP_MEASURE_LAYOUTS:-1x2 2x1 2x2}
budget=${AMP_MEASURE_BUDGET:-1}
# No evaluation or text sample: only the training loop is timed (summary.json counts it alone, but
# the runs finish sooner).
if grep -Eq '^\s*type:\s*gpt' "$cfg"; then
  no_eval="--set sample.tokens=0 --set data.eval_fraction=0"
else
  no_eval="--set data.eval_images= --set data.eval_labels="
fi

build=${AMP_NETNS_BUILD:-$root/build/netns}
mkdir -p "$build"
bench=$build/allreduce_time
if [[ ! -x "$bench" || "$here/allreduce_time.cpp" -nt "$bench" ]]; then
  mpicxx -O2 -std=c++17 -o "$bench" "$here/allreduce_time.cpp"
fi

made=0
if ! ns_exists "$(ns_name 1)"; then
  "$here/up.sh" none
  made=1
fi
finish() {
  "$here/rate.sh" none >/dev/null 2>&1 || true
  if ((made)); then "$here/down.sh" >/dev/null 2>&1 || true; fi
}
trap finish EXIT

results=$out/results.jsonl
: >"$results"
bps_of() {
  [[ "$1" == none ]] && { echo null; return; }
  python3 -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[1].lower())
print(int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]))' "$1"
}

allreduce() {  # allreduce RATE NODES PPN [ALGO]: ALGO default (Open MPI's choice) or ring (forced)
  local rate=$1 n=$2 g=$3 algo=${4:-default} bps line extra=""
  bps=$(bps_of "$rate")
  [[ "$algo" == ring ]] && extra="--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4"
  echo "scaling_measure: all-reduce ${n}x${g} at ${rate} (${algo})" >&2
  # shellcheck disable=SC2086
  AMP_NETNS_NODES=$n AMP_NETNS_PPN=$g AMP_NETNS_MPIRUN_ARGS="$extra" "$here/run.sh" "$bench" --budget "$budget" $sizes |
    while read -r line; do
      [[ "$line" == "{"* ]] || continue
      echo "{\"kind\": \"allreduce\", \"algo\": \"$algo\", \"rate\": \"$rate\", \"rate_bps\": $bps, \"nodes\": $n, \"ppn\": $g, ${line#\{}"
    done >>"$results"
}

goodput() {  # goodput RATE: one TCP stream node 1 -> node 2
  local rate=$1 bps bytes line port=$((20000 + RANDOM % 20000))
  bps=$(bps_of "$rate")
  bytes=$(( ${AMP_MEASURE_TCP_MB:-24} * 1048576 ))
  [[ "$rate" == none ]] && bytes=$((bytes * 8))
  ip netns exec "$(ns_name 2)" python3 "$here/tcp_goodput.py" server "$(ns_addr 2)" "$port" "$bytes" &
  line=$(ip netns exec "$(ns_name 1)" python3 "$here/tcp_goodput.py" client "$(ns_addr 2)" "$port" "$bytes")
  wait
  echo "{\"kind\": \"tcp\", \"rate\": \"$rate\", \"rate_bps\": $bps, ${line#\{}" >>"$results"
}

train() {  # train RATE NODES PPN
  local rate=$1 n=$2 g=$3 bps dir
  bps=$(bps_of "$rate")
  dir=$out/train_${rate}_${n}x${g}
  echo "scaling_measure: training ${n}x${g} at ${rate}" >&2
  # shellcheck disable=SC2086
  AMP_NETNS_NODES=$n AMP_NETNS_PPN=$g "$here/run.sh" "$bin" "$cfg" --set run.steps="$steps" \
    --set run.threads=1 --set run.log_interval=1000 --set run.progress=off --set run.eval_interval=0 \
    $no_eval --set checkpoint.final=false \
    --set "run.out_dir=$dir" >"$dir.log" 2>&1 || { echo "scaling_measure: training failed, see $dir.log" >&2; exit 1; }
  python3 - "$dir/summary.json" "$rate" "$bps" "$n" "$g" >>"$results" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
rate, bps, n, g = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
print(json.dumps({"kind": "train", "model": s.get("model"), "rate": rate, "rate_bps": None if bps == "null" else int(bps), "nodes": n, "ppn": g,
                  "world_size": s["world_size"], "params": s.get("params"), "global_batch": s.get("global_batch"),
                  "step_s": s["train_seconds"] / s["steps"], "samples_per_second": s["samples_per_second"],
                  "allreduce_bytes_per_step": s.get("allreduce_bytes_per_step"),
                  "comm_s": s.get("comm_seconds_per_step"), "exposed_s": s.get("comm_exposed_seconds_per_step"),
                  "hidden_share": s.get("comm_hidden_share")}))
EOF
}

"$here/rate.sh" none >/dev/null
allreduce none 1 2
allreduce none 1 4
train none 1 1
for rate in $rates; do
  "$here/rate.sh" "$rate" >/dev/null
  goodput "$rate"
  allreduce "$rate" 2 1
  allreduce "$rate" 2 2
  allreduce "$rate" 2 2 ring
  for l in $layouts; do train "$rate" "${l%x*}" "${l#*x}"; done
done
"$here/rate.sh" none >/dev/null
echo "scaling_measure: results in $results" >&2
python3 "$root/scripts/scaling_model.py" --measured "$results" | tee "$out/model.md"
