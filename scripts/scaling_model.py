#!/usr/bin/env python3
"""Scaling model for amp_ddp's data-parallel step: alpha-beta all-reduce cost, bucketed overlap
with backward, checked against the two-namespace measurements and projected to H200 clusters.

    scripts/scaling_model.py                                   # projections only
    scripts/scaling_model.py --measured runs/netns_scaling/results.jsonl   # + fit and check
    scripts/scaling_model.py --ib-gbps 200 --gpus-per-node 4 --mlp-compute-ms 0.06
    scripts/scaling_model.py --gpt2-compute-ms 30          # GPT-2 124M with a measured step
    scripts/scaling_model.py --gpt2-accum 8                # (d): 8 micro-batches per step
    scripts/scaling_model.py --mfu runs/NAME/summary.json  # a finished run's model FLOP utilization

Model
-----
* One all-reduce of S bytes over p ranks on a ring whose slowest link moves B bytes/s per
  direction: T = 2(p-1) * alpha + 2(p-1)/p * S / B (reduce-scatter + all-gather, every rank sends
  and receives 2(p-1)/p * S).
* Hierarchical, N nodes x G GPUs: a ring over the G GPUs of a node on NVLink (reduce-scatter and
  all-gather: 2(G-1)/G * S / B_nvlink), and between the nodes G parallel rings, one per GPU and
  NIC, each over that GPU's 1/G shard: 2(N-1)/N * (S/G) / B_ib. The two levels add up.
* A network (class Net) is its gradient tensors in flat-buffer order, each padded to 32 elements,
  and its backward pass as segments in the order they run, each with its FLOPs and the tensors it
  completes: the MLP, amp_ddp's GPT (the tied token embedding is completed last, by the embedding
  backward) and a uniform model. A run's network is read from summary.json's "model".
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
import os
import re
import statistics
import sys
from collections import defaultdict

MiB = 1024 * 1024
PAD = 32  # src/model: each tensor of the flat buffers starts on a 32-element boundary


# ---------------------------------------------------------------- models (tensors, compute split)
class Net:
    """What the step model needs of a network: its gradient tensors in flat-buffer order
    [(name, params)], the forward FLOPs per sample, and the backward pass as segments in the order
    they run [(backward FLOPs per sample, [indices of the tensors whose gradients are complete
    when the segment ends])]. Every tensor is completed by exactly one segment."""

    def __init__(self, name, tensors, fwd_flops, segments):
        self.name, self.tensors, self.fwd_flops, self.segments = name, tensors, fwd_flops, segments
        done = sorted(i for _, ts in segments for i in ts)
        assert done == list(range(len(tensors))), f"{name}: every tensor must be completed once"

    @property
    def params(self):
        return sum(p for _, p in self.tensors)

    @property
    def flops(self):
        """Forward + backward FLOPs per sample."""
        return self.fwd_flops + sum(f for f, _ in self.segments)


def mlp_net(sizes):
    """An MLP sizes[0]-...-sizes[-1]: per sample 2 FLOPs per weight forward, 4 backward (input and
    weight gradients) except the first layer's 2 (no input gradient)."""
    tensors, segs = [], []
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        segs.append(((2 if i == 0 else 4) * fan_in * fan_out, [len(tensors), len(tensors) + 1]))
        tensors += [(f"fc{i + 1}.weight", fan_in * fan_out), (f"fc{i + 1}.bias", fan_out)]
    fwd = 2 * sum(a * b for a, b in zip(sizes, sizes[1:]))
    return Net(f"mlp {'-'.join(map(str, sizes))}", tensors, fwd, list(reversed(segs)))


def gpt_net(n_layer, n_embd, seq_len, vocab):
    """amp_ddp's GPT (src/model/gpt.cpp): wte (tied LM head), wpe, n_layer pre-LayerNorm blocks,
    ln_f, in flat-buffer order. FLOPs per token: every GEMM (the attention products in full T x T,
    as computed), 2 per multiply-add; backward twice the forward. Backward runs the LM head, ln_f,
    then each block's MLP half and attention half from the last block down, then the embeddings:
    the tied wte is complete only at the very end (the embedding adds its gradient to the head's)."""
    C, T, V = n_embd, seq_len, vocab
    tensors = [("wte.weight", V * C), ("wpe.weight", T * C)]
    mlp_half, attn_half = [], []
    for i in range(n_layer):
        h = f"h.{i}."
        base = len(tensors)
        for name, weight, bias in (("ln_1", C, C), ("attn.qkv", 3 * C * C, 3 * C), ("attn.proj", C * C, C),
                                   ("ln_2", C, C), ("mlp.fc", 4 * C * C, 4 * C), ("mlp.proj", 4 * C * C, C)):
            tensors += [(h + name + ".weight", weight), (h + name + ".bias", bias)]
        attn_half.append(list(range(base, base + 6)))      # ln_1, qkv, proj
        mlp_half.append(list(range(base + 6, base + 12)))  # ln_2, fc, proj
    tensors += [("ln_f.weight", C), ("ln_f.bias", C)]
    attn_fwd = 2 * (4 * C * C) + 4 * T * C   # qkv + proj, then Q K^T and P V over T keys
    mlp_fwd = 2 * (8 * C * C)
    head_fwd = 2 * C * V
    segs = [(2 * head_fwd * T, []), (0, [len(tensors) - 2, len(tensors) - 1])]
    for i in reversed(range(n_layer)):
        segs.append((2 * mlp_fwd * T, mlp_half[i]))
        segs.append((2 * attn_fwd * T, attn_half[i]))
    segs.append((0, [1, 0]))
    fwd = (n_layer * (attn_fwd + mlp_fwd) + head_fwd) * T
    return Net(f"gpt {n_layer} layers x {n_embd}, seq {seq_len}, vocab {vocab}", tensors, fwd, segs)


def uniform_net(n_params, n_layers):
    per = n_params / n_layers
    segs = [(4 * per, [i]) for i in range(n_layers)]
    return Net(f"{n_layers} equal layers", [(f"layer{i + 1}", per) for i in range(n_layers)], 2 * n_params,
               list(reversed(segs)))


def net_from_summary(describe):
    """The Net of amp_ddp's summary.json "model" string (Model::describe())."""
    m = re.match(r"gpt (\d+) layers x \d+ heads x (\d+), seq (\d+), vocab (\d+)", describe or "")
    if m:
        return gpt_net(*map(int, m.groups()))
    m = re.match(r"mlp ([\d-]+)", describe or "")
    if m:
        return mlp_net([int(x) for x in m.group(1).split("-")])
    return None


def backward_times(net, compute_s):
    """(forward time, {tensor index: time its gradient is complete}) within a step of compute_s."""
    scale = compute_s / net.flops
    t = net.fwd_flops * scale
    t_fwd, ready = t, {}
    for flops, ts in net.segments:
        t += flops * scale
        for i in ts:
            ready[i] = t
    return t_fwd, ready


def buckets(net, bytes_per_param, first_mb, bucket_mb):
    """Buckets cut from the end of the flat buffer (padding included) as amp_ddp cuts them:
    [(bytes, the share of the step's compute after which backward has produced all of the bucket)]."""
    _, ready = backward_times(net, 1.0)
    bounds, acc = [], 0.0  # (start, end) of each tensor in the buffer, in elements
    for _, p in net.tensors:
        bounds.append((acc, acc + p))
        acc += -(-p // PAD) * PAD if p == int(p) else p  # every tensor starts on a 32-element boundary
    total = acc
    out, end, cap = [], total, first_mb * MiB / bytes_per_param
    while end > 1e-9:
        start = max(0.0, end - cap)
        t = max(ready[i] for i, (a, b) in enumerate(bounds) if a < end - 1e-9 and b > start + 1e-9)
        out.append(((end - start) * bytes_per_param, t))
        end, cap = start, bucket_mb * MiB / bytes_per_param
    return out


def step_time(compute_s, net, bucket_list, allreduce, flag_s):
    """(step without overlap, step with overlap, total comm) for one step of compute_s; bucket_list
    from buckets()."""
    t_fwd, _ = backward_times(net, compute_s)
    comm_total = sum(allreduce(b) for b, _ in bucket_list)
    engine = t_fwd
    for b, ready in bucket_list:
        engine = max(engine, ready * compute_s) + allreduce(b)
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
    default_mlp = f"mlp 784-{'-'.join(map(str, args.mlp_hidden))}-10"
    by_model = defaultdict(list)
    for r in tr:  # results of older measurements carry no "model": the default MLP was trained
        by_model[r.get("model") or default_mlp].append(r)
    for describe, runs in by_model.items():
        check_training(describe, runs, fits, args)


def check_training(describe, tr, fits, args):
    net = net_from_summary(describe)
    if net is None:
        print(f"\n(no step model for {describe!r}: training check skipped)")
        return
    bl = buckets(net, 2, args.first_bucket_mb, args.bucket_mb)
    batch = {r.get("global_batch", 0) // max(1, r["world_size"]) for r in tr} - {0}
    print(f"\n## Training step across the namespaces: model vs measurement, {describe}\n")
    print(f"{net.params / 1e6:.2f} M parameters, 16-bit gradients {sum(b for b, _ in bl) / 1e6:.2f} MB per step in "
          f"{len(bl)} buckets, batch {'/'.join(map(str, sorted(batch))) or '?'} per rank, 1 CPU "
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
        no, ov, comm = step_time(comp, net, bl, f, a)
        hs = "-" if r["hidden_share"] is None else f"{r['hidden_share']:.2f}"
        print(f"| {fmt_rate(r['rate_bps'])} | {n}x{g} | {comp * 1e3:.2f} | {(r['comm_s'] or 0) * 1e3:.2f} | "
              f"{comm * 1e3:.2f} | {r['step_s'] * 1e3:.2f} | {no * 1e3:.2f} | {ov * 1e3:.2f} | "
              f"{ov / r['step_s']:.2f} | {hs} |")


# ---------------------------------------------------------------- projections
def project(title, net, bytes_per_param, compute_s, args, hw, note, accum=1):
    """compute_s: one micro-batch's forward + backward; accum micro-batches per step (gradient
    accumulation: the buckets are all-reduced once, overlapping only the last backward)."""
    bl = buckets(net, bytes_per_param, args.first_bucket_mb, args.bucket_mb)
    total = sum(b for b, _ in bl)
    g = args.gpus_per_node
    print(f"\n### {title}\n")
    print(note + "\n")
    per = f"per micro-batch x {accum} micro-batches " if accum > 1 else ""
    print(f"Gradients {total / 1e6:,.1f} MB per step in {len(bl)} bucket(s); compute {compute_s * 1e3:.4g} ms "
          f"{per}per step per GPU; {g} GPUs per node; NVLink {hw['bw_nvl'] / 1e9:g} GB/s and InfiniBand "
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
        early = (accum - 1) * compute_s  # the micro-batches before the last: no communication
        no, ov, _ = step_time(compute_s, net, bl, f, flag)
        ft = lambda s, n=n: sum(hierarchical(n, g, s, hw, tree=True))
        _, ovt, _ = step_time(compute_s, net, bl, ft, ft(4 * (2 + n * g)))
        no, ov, ovt, c = no + early, ov + early, ovt + early, accum * compute_s
        print(f"| {n} | {n * g} | {intra * 1e3:.3f} | {inter * 1e3:.3f} | {no * 1e3:.3f} | "
              f"{c / no:.0%} | {ov * 1e3:.3f} | {c / ov:.0%} | {c / ovt:.0%} |")


def print_mfu(path, peak_tflops):
    """Model FLOP rate of a finished run (its summary.json): FLOPs per sample of its model
    (summary "model") x samples per step per rank / step time, against the peak of one device.
    The step time is the median of the logged intervals' step_ms after the first (the steady state:
    the first interval carries start-up, e.g. CUDA-graph capture) when metrics.jsonl is beside
    the summary, else train_seconds / steps. Prints a sentence and a JSON line."""
    with open(path) as f:
        s = json.load(f)
    net = net_from_summary(s.get("model"))
    if net is None:
        print(f"scaling_model: {path}: no FLOP count for model {s.get('model')!r}", file=sys.stderr)
        return 1
    per_rank = s["global_batch"] / max(1, s["world_size"])
    step_s, how = s["train_seconds"] / max(1, s["steps"]), "train_seconds / steps"
    metrics = os.path.join(os.path.dirname(path), "metrics.jsonl")
    if os.path.exists(metrics):
        with open(metrics) as f:
            ms = [json.loads(line).get("step_ms") for line in f if line.strip()]
        ms = [m for m in ms if m]
        if len(ms) >= 2:
            step_s, how = statistics.median(ms[1:]) / 1e3, f"median of {len(ms) - 1} logged intervals after the first"
    rate = net.flops * per_rank / step_s
    mfu = rate / (peak_tflops * 1e12)
    print(f"{s['model']}, {s.get('precision')}: {net.flops / 1e9:.3f} GFLOP per sample (forward + backward), "
          f"{per_rank:g} samples per step per rank, step {step_s * 1e3:.1f} ms ({how}), {rate / 1e12:.2f} TFLOP/s "
          f"per rank = {mfu:.1%} of {peak_tflops:g} TFLOP/s (model FLOP utilization)")
    print(json.dumps({"bench": "amp_mfu", "model": s["model"], "precision": s.get("precision"),
                      "samples_per_rank_step": per_rank, "step_ms": step_s * 1e3, "tflops": rate / 1e12,
                      "mfu": mfu, "peak_tflops": peak_tflops}))
    return 0


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
    ap.add_argument("--gpt2-batch", type=int, default=16,
                    help="GPT-2 124M sequences of 1024 tokens per GPU per step (configs/gpt2_124m.yaml: 16)")
    ap.add_argument("--gpt2-mfu", type=float, default=0.40, help="GPT-2 124M: share of the 989 TFLOP/s reached")
    ap.add_argument("--gpt2-accum", type=int, default=4,
                    help="GPT-2 124M: micro-batches per step of the accumulation projection (d)")
    ap.add_argument("--gpt2-compute-ms", type=float, default=None,
                    help="GPT-2 124M forward+backward per step per GPU, measured (overrides --gpt2-mfu)")
    ap.add_argument("--mfu", metavar="SUMMARY_JSON",
                    help="only print the model FLOP rate of a finished amp_ddp run (its summary.json) and its "
                         "share of --peak-tflops (model FLOP utilization)")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="for --mfu (H200 dense BF16/FP16: 989)")
    args = ap.parse_args()
    args.nodes = [int(x) for x in args.nodes.split(",")]
    if args.mfu:
        return print_mfu(args.mfu, args.peak_tflops)
    args.mlp_hidden = [int(x) for x in args.mlp_hidden.split(",") if x]

    if args.measured:
        check_measured(args.measured, args)

    eff = args.link_efficiency
    hw = dict(bw_nvl=args.nvlink_gbytes / 2 * 1e9 * eff, bw_ib=args.ib_gbps / 8 * 1e9 * eff,
              alpha_nvl=args.alpha_nvlink_us * 1e-6, alpha_ib=args.alpha_ib_us * 1e-6)
    print(f"\n## Projection: N nodes x {args.gpus_per_node} H200, hierarchical ring all-reduce\n")
    sizes = [784] + args.mlp_hidden + [10]
    project(f"(a) the default MLP ({'-'.join(map(str, sizes))}), fp16 gradients, batch 128 per GPU",
            mlp_net(sizes), 2, args.mlp_compute_ms * 1e-3, args, hw,
            f"Compute per step: {args.mlp_compute_ms:g} ms per GPU (assumed unless given: {mlp_net(sizes).flops * 128 / 1e9:.2f} "
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
            uniform_net(args.big_params, args.big_layers), 2, big_s, args, hw, "Compute: " + why)
    gpt2 = gpt_net(12, 768, 1024, 50257)
    wte = gpt2.tensors[0][1]
    tokens = args.gpt2_batch * 1024
    if args.gpt2_compute_ms is not None:
        gpt2_s = args.gpt2_compute_ms * 1e-3
        why = f"{args.gpt2_compute_ms:g} ms per step per GPU (given: measured)."
    else:
        gpt2_s = gpt2.flops * args.gpt2_batch / (989e12 * args.gpt2_mfu)
        why = (f"{gpt2.flops / 1024 / 1e6:,.0f} MFLOP per token forward + backward (every GEMM, attention in full "
               f"T x T, the tied LM head over 50257 tokens) x {tokens:,} tokens per GPU per step = "
               f"{gpt2.flops * args.gpt2_batch / 1e12:.1f} TFLOP at {args.gpt2_mfu:.0%} of 989 TFLOP/s = "
               f"**{gpt2_s * 1e3:.1f} ms per step per GPU, an assumption** (model FLOP utilization not yet "
               "measured: scripts/gpu_check.sh measures it on a lent H200; pass it with --gpt2-compute-ms).")
    project(f"(c) GPT-2 124M (12 x 768, seq 1024, vocabulary 50257, tied embedding), bf16 gradients, "
            f"{args.gpt2_batch} x 1024 tokens per GPU", gpt2, 2, gpt2_s, args, hw,
            f"{gpt2.params / 1e6:.1f} M parameters. Compute: " + why + f" The tied token embedding "
            f"({wte / 1e6:.1f} M parameters, {2 * wte / 1e6:.0f} MB of gradients) is complete only when the "
            "embedding's backward ends the pass, so its buckets cannot overlap backward.")
    a = args.gpt2_accum
    project(f"(d) GPT-2 124M as (c), {a} micro-batches of {args.gpt2_batch} x 1024 tokens per GPU per step "
            f"(data.grad_accum_steps {a})", gpt2, 2, gpt2_s, args, hw,
            f"Gradient accumulation: {a} forward + backward passes per step, the gradients all-reduced once, "
            "overlapping the last backward only (the earlier micro-batches have nothing to send). "
            f"{a * tokens:,} tokens per GPU per step ({8 * a * tokens:,} on one node of 8: llm.c's GPT-2 step "
            "is 524,288).", accum=a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
