#!/usr/bin/env bash
# The largest GPT that fits a per-rank memory budget, by the program's own count: every number
# below is what `amp_ddp --dry-run --ranks N` plans (training state and activations, the same
# functions that size the allocations and the memory check), nothing is allocated.
#  1. bytes per parameter per rank for distributed.zero 0/1/2, and the activations with
#     model.recompute none/block, at one reference model;
#  2. for each width, the most layers (and parameters) whose training state plus the activations of
#     a batch of 1 window fit the budget, for zero 0/1/2 with recompute none and block.
# GPT-2 vocabulary (50257), context 2048, batch 1, bf16 compute, AdamW, fused attention, heads of 128.
# Usage: scripts/plan_largest_gpt.sh [budget GiB per rank (default 80)] [ranks (default 8)] [context (default 2048)]
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: scripts/plan_largest_gpt.sh [budget GiB per rank (default 80)] [ranks (default 8)] [context (default 2048)]"; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
if (($# > 3)); then echo "plan_largest_gpt.sh: at most 3 arguments, got $#" >&2; usage >&2; exit 2; fi
budget=${1:-80}
ranks=${2:-8}
ctx=${3:-2048}
# Each a positive number (the budget may have a fraction), checked here: the planner would take
# "nan" or -5 and print a table of nothing.
[[ $budget =~ ^[0-9]+([.][0-9]+)?$ && ! $budget =~ ^0+([.]0+)?$ ]] ||
  { echo "plan_largest_gpt.sh: budget '$budget': a positive number of GiB per rank was expected" >&2; usage >&2; exit 2; }
[[ $ranks =~ ^[1-9][0-9]{0,6}$ ]] ||
  { echo "plan_largest_gpt.sh: ranks '$ranks': a whole number from 1 was expected" >&2; usage >&2; exit 2; }
[[ $ctx =~ ^[1-9][0-9]{0,6}$ ]] ||
  { echo "plan_largest_gpt.sh: context '$ctx': a whole number from 1 was expected" >&2; usage >&2; exit 2; }
bin=${AMP_BUILD:-build}/amp_ddp
[ -x "$bin" ] || { echo "error: $bin not built (cmake --build build --target amp_ddp)" >&2; exit 1; }
exec /usr/bin/python3 - "$bin" "$budget" "$ranks" "$ctx" <<'PY'
import re, subprocess, sys
binary, budget, N, T = sys.argv[1], float(sys.argv[2]) * 2**30, int(sys.argv[3]), int(sys.argv[4])
cache = {}
MAX_LAYERS = 256  # model.n_layer's range

def plan(C, L, zero, recompute):
    """(parameters, state bytes, activation bytes) per rank as amp_ddp --dry-run counts them."""
    key = (C, L, zero, recompute)
    if key not in cache:
        sets = {"model.vocab_size": 50257, "model.seq_len": T, "model.n_embd": C, "model.n_head": C // 128,
                "model.n_layer": L, "model.attention": "fused", "model.recompute": recompute,
                "data.batch_size": 1, "data.eval_batch_size": 1, "precision.compute": "bf16",
                "distributed.zero": zero, "optimizer.type": "adamw",
                "sample.tokens": 0}  # training alone: no sampling buffers (Gpt::decoder_sizes)
        cmd = [binary, "configs/gpt_fortunes_fp16.yaml", "--dry-run", "--ranks", str(N)]
        for k, v in sets.items():
            cmd += ["--set", f"{k}={v}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:  # amp_ddp's own message (a context beyond model.seq_len's range, say)
            sys.stderr.write(r.stderr)
            sys.exit(f"plan_largest_gpt.sh: amp_ddp --dry-run refused the plan of n_embd {C}, n_layer {L} "
                     f"(exit {r.returncode}): {' '.join(cmd)}")
        out = r.stdout
        p = int(re.search(r"# parameters: \S+ \((\d+);", out).group(1))
        m = re.search(r"# memory per rank in bytes: state (\d+) activations (\d+) total (\d+)", out)
        cache[key] = (p, int(m.group(1)), int(m.group(2)))
    return cache[key]

def fits(C, L, zero, rc):
    _, s, a = plan(C, L, zero, rc)
    return s + a <= budget

def largest(C, zero, rc):
    """The most layers that fit: the counts are close to linear in L, so a line through two plans
    guesses, and plans at the guess and its neighbours settle it."""
    if not fits(C, 1, zero, rc):
        return 0
    _, s1, a1 = plan(C, 1, zero, rc)
    _, s2, a2 = plan(C, 9, zero, rc)
    per = ((s2 + a2) - (s1 + a1)) / 8
    L = min(MAX_LAYERS, max(1, int(1 + (budget - (s1 + a1)) / per)))
    while L > 1 and not fits(C, L, zero, rc):
        L -= 1
    while L < MAX_LAYERS and fits(C, L + 1, zero, rc):
        L += 1
    return L

modes = [(z, rc) for rc in ("none", "mlp", "block") for z in (0, 1, 2)]
print(f"# amp_ddp --dry-run --ranks {N}: GPT-2 vocabulary, context {T}, batch 1, bf16, AdamW, fused attention; "
      f"budget {budget / 2**30:g} GiB per rank")
print()
C0, L0 = 4096, 32
print(f"### Bytes per parameter per rank ({N} ranks; reference model n_embd {C0}, n_layer {L0})")
print()
print("| zero | recompute | parameters | state bytes / parameter | activations (1 window) | state + activations |")
print("|---|---|---|---|---|---|")
for z, rc in modes:
    p, s, a = plan(C0, L0, z, rc)
    print(f"| {z} | {rc} | {p / 1e9:.2f} B | {s / p:.3f} | {a / 2**30:.2f} GiB | {(s + a) / 2**30:.1f} GiB |")
print()
print(f"### The largest GPT that fits {budget / 2**30:g} GiB per rank on {N} ranks (n_layer, parameters)")
print()
print("| n_embd | " + " | ".join(f"zero {z}, recompute {rc}" for z, rc in modes) + " |")
print("|---|" + "---|" * len(modes))
best = 0
for C in (2048, 4096, 6144, 8192, 12288, 16384):
    cells = []
    for z, rc in modes:
        L = largest(C, z, rc)
        p = plan(C, L, z, rc)[0] if L else 0
        if z == 2 and rc == "block":
            best = max(best, p)
        more = "+" if L == MAX_LAYERS and fits(C, L, z, rc) else ""  # the range ends before the budget
        cells.append(f"{L}{more}: {p / 1e9:.2f} B" if L else "-")
    print(f"| {C} | " + " | ".join(cells) + " |")
print()
print(f"largest with zero 2 and recompute block: {best / 1e9:.2f} B parameters ({len(cache)} plans; "
      f"256+: model.n_layer's range ends first)")
PY
