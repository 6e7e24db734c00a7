"""ZeRO stage 2 (distributed.zero: 2): stage 1 whose ranks return each gradient bucket's memory once
it is reduced. The arithmetic is stage 1's, so every bit must be zero 0's.

- 2 ranks, the MLP with clipping and a planted overflow on rank 1: every logged loss, scale, skip and
  grad_norm, the params_hash and the optimizer-state hash equal zero 0's, in FP16 (overlap off and
  on, and with 2 accumulated micro-batches), BF16 and FP32; the overflow skipped on every rank, named.
- The GPT (tied embedding, clipping), overlap off and on: zero 2 == zero 0 bit for bit; with overlap
  the update's all-gather runs into the next forward pass (each layer waits for its own weights):
  with evaluations every 4 steps and the ranks' weights compared after every step (both read the
  weights between steps), still zero 0's bits and evaluation losses.
- Stop (SIGTERM drill) and resume with zero 2: the uninterrupted run's bits; the same checkpoint
  resumed with zero 1 too (stage 1 and 2 compute alike).
- Memory: a GPT whose 16-bit gradients are 85.5 MB, buckets of 2 MiB: the program counts the
  gradient buffer's window (two largest tensors, three buckets, four 2 MiB pages) instead of the
  whole buffer, measures the window's high-water mark below the count (overlap off and on, and with
  accumulation), rank 0's peak resident memory drops by the counted difference from zero 1 (within
  4 MiB), and zero 2 equals zero 1 bit for bit there too.
- Planned: `--dry-run --ranks 8` counts zero 2's gradients below zero 1's without launching 8 ranks.
- Refused: precision.telemetry_interval (it reads whole gradients) with zero 2; --ranks without --dry-run.
"""
import os
import re
from e2e_util import QUICK_EVAL, records, check, done, run, source, summary, tmpdir

base = tmpdir()
cfg = os.path.join(base, "zero2.yaml")
with open(cfg, "w") as f:
    f.write("run: {name: zero2, steps: 30, log_interval: 1, progress: off, eval_interval: 0}\n"
            "model: {hidden: [512, 256]}\n"
            "data: {format: synthetic, batch_size: 8, synthetic: {train_samples: 2048, eval_samples: 256}}\n"
            "precision: {compute: fp16, loss_scale: {mode: dynamic, init_scale: 4096, growth_interval: 8}}\n"
            "optimizer: {type: adamw, lr: 0.01, grad_clip: 0.05, weight_decay: 0.01}\n"
            "distributed: {first_bucket_mb: 0.01, bucket_mb: 0.05}\n"
            "faults:\n  inject_nonfinite: [{step: 10, rank: 1, tensor: fc2.weight, value: inf}]\n")


def train(config, tag, sets, np=2):
    out = os.path.join(base, tag)
    rc, so, err = run(config, [f"run.out_dir={out}"] + sets, np=np)
    check(rc == 0, f"{tag}: exit 0 ({err[-300:]})")
    return out, so


def same(a, b, what):
    ra, rb = records(a), records(b)
    sa, sb = summary(a), summary(b)
    check(ra == rb and sa["params_hash"] == sb["params_hash"] and sa["optimizer_state_hash"] == sb["optimizer_state_hash"],
          f"{what}: {len(ra)} logged records identical, params_hash {sa['params_hash']} / {sb['params_hash']}, "
          f"optimizer state {sa['optimizer_state_hash']} / {sb['optimizer_state_hash']}")


# ---- the MLP: every precision, overlap off and on, accumulation ----------------------------------
for prec, extra in (("fp16", []), ("fp16", ["data.grad_accum_steps=2"]), ("bf16", []), ("fp32", [])):
    p = [f"precision.compute={prec}"] + extra
    tag = prec + ("_accum" if extra else "")
    r0, _ = train(cfg, f"{tag}_z0", p + ["distributed.zero=0"])
    for ov in ("off", "on") if tag == "fp16" else ("off",):
        r2, so = train(cfg, f"{tag}_z2_{ov}", p + ["distributed.zero=2", f"distributed.overlap={ov}"])
        same(r0, r2, f"{tag} overlap {ov}: zero 2 against zero 0")
        clipped = sum(1 for m in records(r2) if (m.get("grad_norm") or 0) > 0.05)
        s2 = summary(r2)
        check(s2["zero"] == 2 and s2["skipped_steps"] == summary(r0)["skipped_steps"] >= 1 and clipped > 20 and
              "step 10: non-finite gradients in fc2.weight on rank 1 | step skipped on every rank" in so and
              "gradient buckets returned once reduced (distributed.zero 2)" in so,
              f"{tag} overlap {ov}: zero 2 said so at start-up; the overflow planted on rank 1 skipped on every rank, "
              f"named; {clipped} steps clipped")

# ---- the GPT ------------------------------------------------------------------------------------
gpt = source("configs", "gpt_fortunes_fp16.yaml")
gsets = ["run.steps=12", "run.log_interval=1", "run.eval_interval=0", "sample.tokens=0", "model.n_layer=2",
         "checkpoint.final=false", "run.progress=off", "distributed.bucket_mb=0.1", "distributed.first_bucket_mb=0.02"
         ] + QUICK_EVAL
g0, _ = train(gpt, "gpt_z0", gsets + ["distributed.zero=0"])
for ov in ("off", "on"):
    g2, _ = train(gpt, f"gpt_z2_{ov}", gsets + ["distributed.zero=2", f"distributed.overlap={ov}"])
    same(g0, g2, f"gpt overlap {ov}: zero 2 against zero 0")
    ob = summary(g2).get("allgather_buckets_overlapped")
    if ov == "off":
        check(ob is None, f"gpt overlap off: no overlapped all-gather reported ({ob})")
    else:  # nothing reads the weights between steps here but the last step's evaluation and hash:
        # the next forward waits for the buckets of 11 steps' all-gathers, the last step's are settled
        check(ob is not None and ob["awaited_by_forward"] > 0 and
              ob["awaited_by_forward"] == 11 * ob["settled_by_other_readers"],
              f"gpt overlap on: the forward passes waited for the all-gathers' buckets themselves ({ob})")
reads = ["run.eval_interval=4", "distributed.hash_interval=1"]
g0e, _ = train(gpt, "gpt_z0_reads", gsets + reads + ["distributed.zero=0"])
g2e, _ = train(gpt, "gpt_z2_on_reads", gsets + reads + ["distributed.zero=2", "distributed.overlap=on"])
same(g0e, g2e, "gpt overlap on, evaluations every 4 steps, weights compared every step: zero 2 against zero 0")
check(sum(1 for r in records(g2e) if "eval_loss" in r) == 3, "the overlapped run evaluated at steps 4, 8 and 12")
ob = summary(g2e).get("allgather_buckets_overlapped", {})
check(ob.get("settled_by_other_readers", 0) > 0, f"there, the per-step hash settled the all-gathers first ({ob})")

# Samples every 4 steps read the weights while the overlapped all-gather may still be in flight:
# the decoder waits for it (Model::before_weights), so zero 0's samples are drawn again.
samp = [s for s in gsets if s != "sample.tokens=0"] + ["run.sample_interval=4", "sample.tokens=8"]
g0s, _ = train(gpt, "gpt_z0_samples", samp + ["distributed.zero=0"])
g2s, _ = train(gpt, "gpt_z2_on_samples", samp + ["distributed.zero=2", "distributed.overlap=on"])
same(g0s, g2s, "gpt overlap on, a sample every 4 steps: zero 2 against zero 0 (the samples included)")
check(sum(1 for r in records(g2s) if "sample" in r) == 3, "the overlapped run sampled at steps 4, 8 and 12")

# ---- stop and resume ----------------------------------------------------------------------------
ref = os.path.join(base, "fp16_z2_off")
for z in (2, 1):
    cut = os.path.join(base, f"cut_{z}")
    zsets = ["distributed.overlap=off", f"run.out_dir={cut}"]
    rc, so, err = run(cfg, zsets + ["distributed.zero=2", "faults.raise_signal=[{step: 20, rank: 0}]"], np=2)
    check(rc == 0 and summary(cut).get("stopped_early"), f"zero 2: the SIGTERM drill stops after step 20 ({err[-300:]})")
    rc, so, err = run(cfg, zsets + [f"distributed.zero={z}", "checkpoint.resume=auto"], np=2)
    check(rc == 0 and records(cut) == records(ref) and summary(cut)["params_hash"] == summary(ref)["params_hash"] and
          summary(cut)["optimizer_state_hash"] == summary(ref)["optimizer_state_hash"],
          f"stopped with zero 2 at step 20, resumed with zero {z}: the uninterrupted run bit for bit ({err[-300:]})")

# ---- memory -------------------------------------------------------------------------------------
msets = ["run.steps=2", "run.log_interval=1", "run.eval_interval=0", "sample.tokens=0", "checkpoint.final=false",
         "run.progress=off", "model.n_embd=768", "model.n_layer=6", "model.n_head=12", "data.batch_size=2",
         "data.eval_fraction=0", "distributed.bucket_mb=2", "distributed.first_bucket_mb=0.5"]  # no evaluation
for tag, extra, overlaps in (("", [], ("off", "on")), ("accum", ["data.grad_accum_steps=2"], ("off",))):
    m1, _ = train(gpt, f"mem{tag}_z1", msets + extra + ["distributed.zero=1"])
    s1 = summary(m1)
    for ov in overlaps:
        what = f"overlap {ov}" + (f", {tag}" if tag else "")
        m2, _ = train(gpt, f"mem{tag}_z2_{ov}", msets + extra + ["distributed.zero=2", f"distributed.overlap={ov}"])
        s2 = summary(m2)
        same(m1, m2, f"memory run, {what}: zero 2 against zero 1")
        flat16 = s1["state_bytes_per_rank"]["working_copy"]  # the 16-bit flat buffer, as the gradients
        window = s2["zero2_gradient_buffer_rank0"]["counted"]
        measured = s2["zero2_gradient_buffer_rank0"].get("measured_peak", 0)
        saved = s1["state_bytes_per_rank"]["gradients"] - s2["state_bytes_per_rank"]["gradients"]
        rss = s1["peak_resident_bytes_rank0"] - s2["peak_resident_bytes_rank0"]
        check(saved == flat16 - window and window < flat16 // 3 and 0 < measured <= window,
              f"{what}: the gradient buffer counted {window:,} bytes of {flat16:,} (saves {saved:,}); "
              f"its high-water mark measured {measured:,}")
        check(rss >= saved - 2 ** 22,
              f"{what}: rank 0's peak resident memory {s1['peak_resident_bytes_rank0']:,} -> "
              f"{s2['peak_resident_bytes_rank0']:,} bytes ({rss:,} less; counted {saved:,})")

# ---- the plan of 8 ranks, without launching them ---------------------------------------------------
plans = {}
for z in (1, 2):
    rc, so, err = run(gpt, [f"distributed.zero={z}", "model.n_embd=768", "model.n_layer=8", "model.n_head=12",
                            "distributed.bucket_mb=2"], extra=["--dry-run", "--ranks", "8"])
    m = re.search(r"# plan: (\d+) rank\(s\).*# memory per rank in bytes: state (\d+) activations (\d+) total (\d+) gradients (\d+)",
                  so, re.S)
    check(rc == 0 and m is not None and m.group(1) == "8", f"--dry-run --ranks 8 plans 8 ranks, zero {z} ({err[-200:]})")
    plans[z] = int(m.group(5)) if m else 0
check(plans[1] - plans[2] > 80 * 2**20, f"the plan counts zero 2's gradients below zero 1's ({plans[1]:,} -> {plans[2]:,} bytes)")
rc, so, err = run(gpt, [], extra=["--ranks", "8"])
check(rc == 2 and "--ranks requires --dry-run" in err, f"--ranks without --dry-run is a usage error ({rc}: {err[-200:]})")

# ---- refused ------------------------------------------------------------------------------------
rc, so, err = run(cfg, [f"run.out_dir={os.path.join(base, 'telemetry')}", "distributed.zero=2",
                        "precision.telemetry_interval=5"], np=2)
check(rc == 2 and "precision.telemetry_interval" in err and "distributed.zero 1" in err,
      f"telemetry with zero 2: a config error naming the key ({rc}: {err[-300:]})")
done()
