#!/usr/bin/env python3
"""Scaling model for amp_ddp's data-parallel step: alpha-beta all-reduce cost, bucketed overlap
with backward, checked against the two-namespace measurements and projected to H200 clusters.

    scripts/scaling_model.py                                   # projections only
    scripts/scaling_model.py --measured runs/netns_scaling/results.jsonl   # + fit and check
    scripts/scaling_model.py --ib-gbps 200 --gpus-per-node 4 --mlp-compute-ms 0.06

Model
-----
* One all-reduce of S bytes over p ranks on a ring whose slowest link moves B bytes/s per
  direction: T = 2(p-1) * alpha + 2(p-1)/p * S / B (reduce-scatter + all-gather, every rank sends
  and receives 2(p-1)/p * S).
* Hierarchical, N nodes x G GPUs: a ring over the G GPUs of a node on NVLink (reduce-scatter and
  all-gather: 2(G-1)/G * S / B_nvlink), and between the nodes G parallel rings, one per GPU and
  NIC, each over that GPU's 1/G shard: 2(N-1)/N * (S/G) / B_ib. The two levels add up.
* The gradients are all-reduced in buckets cut from the end of the flat gradient buffer
  (distributed.first_bucket_mb, then bucket_mb; docs/design.md); a bucket starts when the
  backward pass has produced all of it and the buckets run one after the other. Backward time
  is spread over the layers in proportion to their GEMM FLOPs (2 GEMMs per layer, 1 for the
  first), forward:backward = the FLOP ratio. Without overlap the step is compute + all buckets;
  with overlap it is forward + max(backward, the end of the last bucket) + one small all-reduce
  (the overflow flags). Weak-scaling efficiency = compute time / step time (a single GPU has
  nothing to communicate).
* Measured check (--measured): fits T = alpha + S / beta to the MPI_Allreduce times of each link
  rate and layout of scripts/netns/scaling_measure.sh, prints fit vs measurement, the bytes
  factor beta_link/beta (2(p-1)/p = 1.5 for a flat ring of 4 ranks over the one link, 1.0 for a
  2-rank ring or a hierarchical all-reduce), then predicts the training step of each layout and
  rate from the compute time measured at the unlimited rate plus the modelled communication, and
  prints it next to the measured step.

Hardware figures (published): H200 SXM NVLink 4: 900 GB/s per GPU (total, both directions: 450
GB/s each way) (NVIDIA H200 Tensor Core GPU datasheet); InfiniBand NDR: 400 Gb/s per port, one
ConnectX-7 port per GPU in HGX/DGX H200 systems (NVIDIA DGX H200 datasheet / ConnectX-7 product
brief): 50 GB/s each way. BF16 dense tensor throughput 989 TFLOP/s (H200 SXM datasheet, without
sparsity). The latencies are assumptions (a few microseconds per ring step on NVLink, more over
InfiniBand); real NCCL reaches 70-90 % of link bandwidth and switches to tree or NVLS algorithms
for small messages and large node counts, so the ring latency term is pessimistic there.
"""
import argparse
import json
import math
import sys
from collections import defaultdict

MiB = 1024 * 1024


# ---------------------------------------------------------------- models (layers, compute split)
def mlp_layers(sizes):
    """[(name, params, gemm_units)] of an MLP, input to output; gemm_units = in*out."""
    out = []
    for i in range(len(sizes) - 1):
        out.append((f"fc{i + 1}", sizes[i] * sizes[i + 1] + sizes[i + 1], sizes[i] * sizes[i + 1]))
    return out


def uniform_layers(n_params, n_layers):
    per = n_params / n_layers
    return [(f"layer{i + 1}", per, per) for i in range(n_layers)]


def compute_split(layers):
    """(forward share, [(layer, backward share of the step)] in backward order)."""
    fwd = sum(u for _, _, u in layers)
    bwd = [(name, (u if i == 0 else 2 * u)) for i, (name, _, u) in enumerate(layers)]
    total = fwd + sum(b for _, b in bwd)
    return fwd / total, [(name, b / total) for name, b in reversed(bwd)]


def buckets(layers, bytes_per_param, first_mb, bucket_mb):
    """Buckets cut from the end of the flat buffer: [(bytes, index of the layer (backward order)
    whose completion makes the bucket ready)]."""
    rev = list(reversed(layers))  # backward order
    bounds, acc = [], 0.0          # cumulative params from the end at each layer's completion
    for _, p, _ in rev:
        acc += p
        bounds.append(acc)
    total = acc
    out, start, cap = [], 0.0, first_mb * MiB / bytes_per_param
    while start < total - 1e-9:
        end = min(total, start + cap)
        ready = next(i for i, b in enumerate(bounds) if b >= end - 1e-9)
        out.append(((end - start) * bytes_per_param, ready))
        start, cap = end, bucket_mb * MiB / bytes_per_param
    return out


def step_time(compute_s, layers, bucket_list, allreduce, flag_s):
    """(step without overlap, step with overlap, total comm) for one step."""
    fwd_share, bwd = compute_split(layers)
    t_fwd = compute_s * fwd_share
    done_at, t = [], t_fwd
    for _, share in bwd:
        t += compute_s * share
        done_at.append(t)
    comm_total = sum(allreduce(b) for b, _ in bucket_list)
    engine = t_fwd
    for b, ready in bucket_list:
        engine = max(engine, done_at[ready]) + allreduce(b)
    overlapped = max(compute_s, engine) + flag_s
    return compute_s + comm_total + flag_s, overlapped, comm_total + flag_s


def ring(p, nbytes, alpha, bw, tree=False):
    """Ring all-reduce time; tree=True: the same bandwidth term with a tree's 2 log2(p) latency
    steps (what NCCL's trees reach for small messages and many nodes)."""
    if p <= 1:
        return 0.0
    steps = 2 * math.ceil(math.log2(p)) if tree else 2 * (p - 1)
    return steps * alpha + 2 * (p - 1) / p * nbytes / bw


def hierarchical(nodes, gpn, nbytes, hw, tree=False):
    intra = ring(gpn, nbytes, hw["alpha_nvl"], hw["bw_nvl"])
    inter = ring(nodes, nbytes / gpn, hw["alpha_ib"], hw["bw_ib"], tree) if nodes > 1 else 0.0
    return intra, inter


# ---------------------------------------------------------------- fit and check
def fit_alpha_beta(points, big=64 * 1024):
    """T = alpha + S / beta: alpha from the smallest message (latency-bound), then 1/beta by least
    squares over the messages of at least `big` bytes with alpha fixed (bandwidth-bound: what the
    gradient buckets see; with tc tbf, messages below the token-bucket burst pass at full speed, so
    one straight line through every size would fit neither end). Returns (alpha s, beta B/s)."""
    pts = sorted(points)
    large = [(s, t) for s, t in pts if s >= big] or pts
    a, inv = pts[0][1], 0.0
    for _ in range(3):
        inv = sum(s * (t - a) for s, t in large) / sum(s * s for s, _ in large)
        a = max(0.0, pts[0][1] - pts[0][0] * inv)
    return a, 1.0 / inv


def fmt_rate(bps):
    if bps is None:
        return "unlimited"
    return f"{bps / 1e9:g} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:g} Mbit/s"


def check_measured(path, args):
    recs = [json.loads(line) for line in open(path) if line.strip()]
    ar = defaultdict(list)
    for r in recs:
        if r["kind"] == "allreduce":
            ar[(r["rate"], r["nodes"], r["ppn"], r.get("algo", "default"))].append(r)
    rate_bps = {r["rate"]: r["rate_bps"] for r in recs}
    goodput = {r["rate"]: r["goodput_bps"] for r in recs if r["kind"] == "tcp"}
    order = lambda k: (k[0] != "none", rate_bps.get(k[0]) or 0, k[1], k[2], k[3])
    fits = {}
    for key in sorted(ar, key=order):
        fits[key] = fit_alpha_beta([(r["bytes"], r["median_s"]) for r in ar[key]])

    print("## Link and all-reduce across the namespaces\n")
    if goodput:
        print("TCP goodput of one stream over the veth link (tc tbf on both ends):\n")
        print("| link | goodput | share of the rate |")
        print("|---|---:|---:|")
        for rate in sorted(goodput, key=lambda r: (r != "none", rate_bps.get(r) or 0)):
            bl = rate_bps.get(rate)
            share = f"{goodput[rate] / bl:.0%}" if bl else "-"
            print(f"| {fmt_rate(bl)} | {goodput[rate] / 1e6:,.0f} Mbit/s | {share} |")
        print()
    print("MPI_Allreduce (float sum), median time per call; fit T = alpha + S/beta (alpha: the 4 KiB time; "
          "beta: least squares over >= 64 KiB). Bytes factor = (link rate / 8) / beta: the bytes each rank pushes through the link "
          "per byte reduced; the ring's 2(p-1)/p is 1.0 for 2 ranks and 1.5 for 4 ranks on one link.\n")
    print("| link | layout | algorithm | alpha (us) | beta (MB/s) | bytes factor | ring 2(p-1)/p |")
    print("|---|---|---|---:|---:|---:|---:|")
    for key in fits:
        rate, n, g, algo = key
        a, b = fits[key]
        bl = rate_bps.get(rate)
        p = n * g
        factor = f"{(bl / 8) / b:.2f}" if bl and n > 1 else "-"
        ringf = f"{2 * (p - 1) / p:.2f}" if n > 1 else "-"
        print(f"| {fmt_rate(bl)} | {n}x{g} | {algo} | {a * 1e6:.1f} | {b / 1e6:,.1f} | {factor} | {ringf} |")
    print("\nFit vs measurement, ms (fit / measured):\n")
    sizes = sorted({r["bytes"] for r in recs if r["kind"] == "allreduce"})
    print("| link | layout | algorithm | " + " | ".join(f"{s // 1024} KiB" for s in sizes) + " |")
    print("|---|---|---|" + "---:|" * len(sizes))
    for key in fits:
        rate, n, g, algo = key
        a, b = fits[key]
        meas = {r["bytes"]: r["median_s"] for r in ar[key]}
        cells = [f"{(a + s / b) * 1e3:.2f} / {meas[s] * 1e3:.2f}" if s in meas else "-" for s in sizes]
        print(f"| {fmt_rate(rate_bps.get(rate))} | {n}x{g} | {algo} | " + " | ".join(cells) + " |")

    big = sizes[-1]
    print(f"\nThe ring formula with no fitted bandwidth: T = alpha + 2(p-1)/p * S / link, S = {big / MiB:g} MiB, "
          "alpha from the fit, link = the nominal rate or the measured TCP goodput; ms:\n")
    print("| link | layout | algorithm | formula, nominal rate | formula, goodput | measured | measured / formula (goodput) |")
    print("|---|---|---|---:|---:|---:|---:|")
    for key in fits:
        rate, n, g, algo = key
        bl = rate_bps.get(rate)
        if not bl or n < 2:
            continue
        a, _ = fits[key]
        meas = {r["bytes"]: r["median_s"] for r in ar[key]}.get(big)
        p = n * g
        nominal = a + 2 * (p - 1) / p * big / (bl / 8)
        gp = goodput.get(rate)
        viagp = a + 2 * (p - 1) / p * big / (gp / 8) if gp else None
        print(f"| {fmt_rate(bl)} | {n}x{g} | {algo} | {nominal * 1e3:.1f} | "
              f"{'-' if viagp is None else f'{viagp * 1e3:.1f}'} | {meas * 1e3:.1f} | "
              f"{'-' if viagp is None else f'{meas / viagp:.2f}'} |")

    # training: compute from the unlimited run of the same layout, comm from the fit
    tr = [r for r in recs if r["kind"] == "train"]
    if not tr:
        return
    layers = mlp_layers([784] + args.mlp_hidden + [10])
    bl = buckets(layers, 2, args.first_bucket_mb, args.bucket_mb)
    print("\n## Training step across the namespaces: model vs measurement\n")
    print(f"Default MLP (784-{'-'.join(map(str, args.mlp_hidden))}-10), fp16 gradients "
          f"{sum(b for b, _ in bl) / 1e6:.2f} MB per step in {len(bl)} buckets, batch 128 per rank, 1 CPU "
          "thread per rank. Compute per step = measured step - measured exposed comm of the same layout "
          "on the unlimited link; the all-reduce model is the fit of that layout and rate with Open MPI's "
          "own algorithm (1 node: the shared-memory fit). All ranks and their communication threads share "
          "2 cores, so 2x2 computes at half speed and overlap is far from free.\n")
    print("| link | layout | compute (ms) | comm measured (ms) | comm model (ms) | step measured (ms) "
          "| model, no overlap (ms) | model, overlap (ms) | model / measured | hidden share measured |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = {}
    for r in tr:
        if r["rate"] == "none":
            base[(r["nodes"], r["ppn"])] = r["step_s"] - (r["exposed_s"] or 0.0)
    for r in sorted(tr, key=lambda r: (r["rate"] != "none", r["rate_bps"] or 0, r["nodes"] * r["ppn"], r["nodes"])):
        n, g = r["nodes"], r["ppn"]
        comp = base.get((n, g))
        if r["world_size"] == 1 or comp is None:
            print(f"| {fmt_rate(r['rate_bps'])} | {n}x{g} | {r['step_s'] * 1e3:.2f} | - | - | "
                  f"{r['step_s'] * 1e3:.2f} | - | - | - | - |")
            continue
        key = (r["rate"], n, g, "default") if n > 1 else ("none", 1, g, "default")
        if key not in fits:
            continue
        a, b = fits[key]
        f = lambda s, a=a, b=b: a + s / b
        no, ov, comm = step_time(comp, layers, bl, f, a)
        hs = "-" if r["hidden_share"] is None else f"{r['hidden_share']:.2f}"
        print(f"| {fmt_rate(r['rate_bps'])} | {n}x{g} | {comp * 1e3:.2f} | {(r['comm_s'] or 0) * 1e3:.2f} | "
              f"{comm * 1e3:.2f} | {r['step_s'] * 1e3:.2f} | {no * 1e3:.2f} | {ov * 1e3:.2f} | "
              f"{ov / r['step_s']:.2f} | {hs} |")


# ---------------------------------------------------------------- projections
def project(title, layers, bytes_per_param, compute_s, args, hw, note):
    bl = buckets(layers, bytes_per_param, args.first_bucket_mb, args.bucket_mb)
    total = sum(b for b, _ in bl)
    g = args.gpus_per_node
    print(f"\n### {title}\n")
    print(note + "\n")
    print(f"Gradients {total / 1e6:,.1f} MB per step in {len(bl)} bucket(s); compute {compute_s * 1e3:g} ms "
          f"per step per GPU; {g} GPUs per node; NVLink {hw['bw_nvl'] / 1e9:g} GB/s and InfiniBand "
          f"{hw['bw_ib'] / 1e9:g} GB/s per GPU and direction; alpha {hw['alpha_nvl'] * 1e6:g} us (NVLink), "
          f"{hw['alpha_ib'] * 1e6:g} us (InfiniBand) per ring step.\n")
    print("| nodes | GPUs | comm in node (ms) | comm between nodes (ms) | step, no overlap (ms) | efficiency "
          "| step, overlap (ms) | efficiency | efficiency, overlap, tree latency |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.nodes:
        intra = sum(hierarchical(n, g, b, hw)[0] for b, _ in bl)
        inter = sum(hierarchical(n, g, b, hw)[1] for b, _ in bl)
        f = lambda s, n=n: sum(hierarchical(n, g, s, hw))
        flag = f(4 * (2 + n * g))  # the overflow-flag MAX all-reduce: latency only
        no, ov, _ = step_time(compute_s, layers, bl, f, flag)
        ft = lambda s, n=n: sum(hierarchical(n, g, s, hw, tree=True))
        _, ovt, _ = step_time(compute_s, layers, bl, ft, ft(4 * (2 + n * g)))
        print(f"| {n} | {n * g} | {intra * 1e3:.3f} | {inter * 1e3:.3f} | {no * 1e3:.3f} | "
              f"{compute_s / no:.0%} | {ov * 1e3:.3f} | {compute_s / ov:.0%} | {compute_s / ovt:.0%} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--measured", help="results.jsonl of scripts/netns/scaling_measure.sh")
    ap.add_argument("--nodes", default="1,2,4,8,16,32,64", help="node counts to project")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--nvlink-gbytes", type=float, default=900.0,
                    help="NVLink GB/s per GPU, both directions together (H200: 900)")
    ap.add_argument("--ib-gbps", type=float, default=400.0, help="InfiniBand Gbit/s per GPU (NDR: 400)")
    ap.add_argument("--link-efficiency", type=float, default=1.0,
                    help="share of the link bandwidth an all-reduce reaches (NCCL: ~0.7-0.9)")
    ap.add_argument("--alpha-nvlink-us", type=float, default=2.0)
    ap.add_argument("--alpha-ib-us", type=float, default=5.0)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--first-bucket-mb", type=float, default=1.0)
    ap.add_argument("--mlp-hidden", default="1024,1024")
    ap.add_argument("--mlp-compute-ms", type=float, default=0.1,
                    help="MLP forward+backward per step per GPU at batch 128 (default: an assumption, "
                         "launch-bound; pass a measured value)")
    ap.add_argument("--big-params", type=float, default=1e9)
    ap.add_argument("--big-layers", type=int, default=24)
    ap.add_argument("--big-tokens", type=float, default=16384, help="tokens per GPU per step")
    ap.add_argument("--big-mfu", type=float, default=0.40, help="share of the 989 TFLOP/s reached")
    ap.add_argument("--big-compute-ms", type=float, default=None, help="overrides tokens/MFU")
    args = ap.parse_args()
    args.nodes = [int(x) for x in args.nodes.split(",")]
    args.mlp_hidden = [int(x) for x in args.mlp_hidden.split(",") if x]

    if args.measured:
        check_measured(args.measured, args)

    eff = args.link_efficiency
    hw = dict(bw_nvl=args.nvlink_gbytes / 2 * 1e9 * eff, bw_ib=args.ib_gbps / 8 * 1e9 * eff,
              alpha_nvl=args.alpha_nvlink_us * 1e-6, alpha_ib=args.alpha_ib_us * 1e-6)
    print(f"\n## Projection: N nodes x {args.gpus_per_node} H200, hierarchical ring all-reduce\n")
    sizes = [784] + args.mlp_hidden + [10]
    project(f"(a) the default MLP ({'-'.join(map(str, sizes))}), fp16 gradients, batch 128 per GPU",
            mlp_layers(sizes), 2, args.mlp_compute_ms * 1e-3, args, hw,
            f"Compute per step: {args.mlp_compute_ms:g} ms per GPU (assumed unless given: {6 * sum(p for _, p, _ in mlp_layers(sizes)) * 128 / 1e9:.2f} "
            "GFLOP per step is ~2 us of tensor-core time, so the step is bound by ~25 kernel launches "
            "of a few us each).")
    if args.big_compute_ms is not None:
        big_s = args.big_compute_ms * 1e-3
        why = f"{args.big_compute_ms:g} ms per step per GPU (given)."
    else:
        flops = 6 * args.big_params * args.big_tokens
        big_s = flops / (989e12 * args.big_mfu)
        why = (f"6 x {args.big_params:.3g} parameters x {args.big_tokens:,.0f} tokens per GPU per step = "
               f"{flops / 1e12:,.0f} TFLOP at {args.big_mfu:.0%} of 989 TFLOP/s (H200 dense BF16) = "
               f"{big_s * 1e3:.0f} ms per step per GPU (e.g. 8 sequences of 2048 tokens; 40 % MFU is "
               "typical of well-tuned BF16 training of models this size).")
    project(f"(b) a {args.big_params / 1e9:g}B-parameter model ({args.big_layers} equal layers), bf16 gradients",
            uniform_layers(args.big_params, args.big_layers), 2, big_s, args, hw, "Compute: " + why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
