"""Gradient accumulation (data.grad_accum_steps) end to end, on the tiny GPT:
- FP32: 1 rank x 2 samples x 4 micro-batches and 2 ranks x 2 x 2 reproduce 1 rank x 8 (every logged
  loss and gradient norm within 1e-5 relative over 30 steps: the same samples per step, the
  gradients summed in FP32 before the one rounding);
- FP16 with dynamic scaling on 2 ranks x 2 x 2: a non-finite gradient planted in the last micro-batch
  on rank 1 is skipped on every rank; small buckets with overlap on and off, and ZeRO stage 1, give the
  same parameters bit for bit;
- a run stopped by SIGTERM and resumed is bit-exact (2 ranks x 2 x 2, BF16); stopped on 2 ranks x 2 x 2
  and resumed on 1 rank x 2 x 4 (the same global batch) it follows the uninterrupted run (FP32, 1e-5);
- resumed with another global batch, the half-finished log interval's loss is rescaled, not inflated;
- the MLP: 4 x 4 micro-batches == 16 (FP32, 1e-5);
- the banner and summary.json report the global batch; grad_accum_steps 0 is a config error."""
import os
from e2e_util import check, done, losses, metrics, run, source, summary, tiny_gpt_config, tmpdir

base = tmpdir()
cfg = tiny_gpt_config(base)


def train(tag, sets, np=None):
    out = os.path.join(base, tag)
    rc, so, err = run(cfg, sets + [f"run.out_dir={out}", "sample.tokens=0"], np=np)
    check(rc == 0, f"{tag}: exit 0 ({err.strip()[-300:]})")
    return out if rc == 0 else None, so


def close(a, b, key):
    xa = [m[key] for m in metrics(a) if key in m]
    xb = [m[key] for m in metrics(b) if key in m]
    worst = max(abs(x - y) / abs(x) for x, y in zip(xa, xb)) if len(xa) == len(xb) == 30 else float("inf")
    return worst


ref, _ = train("ref", [])
for tag, np_, sets in (("1x2x4", None, ["data.batch_size=2", "data.grad_accum_steps=4"]),
                       ("2x2x2", 2, ["data.batch_size=2", "data.grad_accum_steps=2"])):
    out, so = train(tag, sets, np_)
    if ref and out:
        wl, wn = close(ref, out, "loss"), close(ref, out, "grad_norm")
        check(wl < 1e-5 and wn < 1e-5, f"{tag} == 1 rank x 8 in FP32: max relative difference loss {wl:.3g}, "
                                       f"grad_norm {wn:.3g} (< 1e-5)")
        check(summary(out)["global_batch"] == 8 and "global batch 8 (2 x " in so,
              f"{tag}: global batch 8 in summary.json and the banner")

# FP16, dynamic scaling, 2 ranks x 2 x 2: a planted overflow, buckets, overlap, ZeRO 1.
fp16 = ["precision.compute=fp16", "data.batch_size=2", "data.grad_accum_steps=2"]
ov, so = train("overflow", fp16 + ["faults.inject_nonfinite=[{step: 5, rank: 1, tensor: h.1.attn.qkv.weight, value: inf}]"], 2)
if ov:
    check("h.1.attn.qkv.weight on rank 1" in so and "step skipped on every rank" in so and
          summary(ov)["skipped_steps"] == 1, "fp16: the planted overflow is named and skipped once, on every rank")
hashes = {}
for tag, sets in (("fp16_on", ["distributed.overlap=on"]),
                  ("fp16_small_off", ["distributed.overlap=off", "distributed.bucket_mb=0.008", "distributed.first_bucket_mb=0.002"]),
                  ("fp16_small_on", ["distributed.overlap=on", "distributed.bucket_mb=0.008", "distributed.first_bucket_mb=0.002"]),
                  ("fp16_zero1", ["distributed.zero=1"])):
    out, _ = train(tag, fp16 + sets, 2)
    if out:
        hashes[tag] = summary(out)["params_hash"]
check(len(hashes) == 4 and len(set(hashes.values())) == 1,
      f"fp16 x 2 micro-batches: overlap on/off, small buckets and ZeRO 1 give one params_hash ({hashes})")

# Stop after step 12 (SIGTERM) and resume: bit-exact.
bf16 = ["precision.compute=bf16", "data.batch_size=2", "data.grad_accum_steps=2"]
full, _ = train("full", bf16, 2)
part = os.path.join(base, "part")
rc_b, out_b, err_b = run(cfg, bf16 + [f"run.out_dir={part}", "sample.tokens=0",
                                      "faults.raise_signal=[{step: 12, rank: 0, signal: TERM}]"], np=2)
rc_c, out_c, err_c = run(cfg, bf16 + [f"run.out_dir={part}", "sample.tokens=0", "checkpoint.resume=auto"], np=2)
check(rc_b == 0 and "stopped after step 12" in out_b and rc_c == 0 and "at step 12" in out_c,
      f"bf16 x 2 micro-batches: stopped after step 12 and resumed ({err_b[-200:]} {err_c[-200:]})")
if full and rc_c == 0:
    check(summary(part)["params_hash"] == summary(full)["params_hash"] and losses(part) == losses(full),
          "bf16 x 2 micro-batches: the resumed run equals the uninterrupted one bit for bit")

# Elastic: stopped on 2 ranks x 2 x 2 micro-batches, resumed on 1 rank x 2 x 4 (the same global
# batch of 8): the rest of the run follows the uninterrupted 2 x 2 x 2 run (FP32, 1e-5).
el = os.path.join(base, "elastic")
two = os.path.join(base, "2x2x2")
rc_b, out_b, err_b = run(cfg, ["data.batch_size=2", "data.grad_accum_steps=2", f"run.out_dir={el}", "sample.tokens=0",
                               "faults.raise_signal=[{step: 12, rank: 0, signal: TERM}]"], np=2)
rc_c, out_c, err_c = run(cfg, ["data.batch_size=2", "data.grad_accum_steps=4", f"run.out_dir={el}", "sample.tokens=0",
                               "checkpoint.resume=auto"])
check(rc_b == 0 and rc_c == 0 and "at step 12" in out_c and "elastic resume" in out_c and
      "the global batch changed" not in out_c,
      f"elastic: stopped on 2 ranks x 2 x 2, resumed on 1 rank x 2 x 4 with the same global batch ({err_b[-200:]} {err_c[-200:]})")
if rc_c == 0 and os.path.exists(os.path.join(two, "metrics.jsonl")):
    a, b = dict(losses(two)), dict(losses(el))
    worst = max((abs(a[k] - b[k]) / abs(a[k]) for k in range(13, 31) if k in a and k in b), default=float("inf"))
    check(len([k for k in range(13, 31) if k in b]) == 18 and worst < 1e-5,
          f"elastic: steps 13-30 follow the uninterrupted run (max relative loss difference {worst:.3g} < 1e-5)")

# Resumed with another global batch (2 x 4 micro-batches stopped after step 6 inside a log
# interval of 4, resumed with 2 x 2): the interval's carried sums are rescaled to the new batch, so
# the loss logged at step 8 stays near the uninterrupted run's (unscaled, steps 5-6 would count
# twice: about 1.5x).
li = ["run.log_interval=4", "sample.tokens=0"]
u, h = os.path.join(base, "li_full"), os.path.join(base, "li_half")
rc_a, _, err_a = run(cfg, li + ["data.batch_size=2", "data.grad_accum_steps=4", f"run.out_dir={u}"])
rc_b, _, err_b = run(cfg, li + ["data.batch_size=2", "data.grad_accum_steps=4", f"run.out_dir={h}",
                                "faults.raise_signal=[{step: 6, rank: 0, signal: TERM}]"])
rc_c, out_c, err_c = run(cfg, li + ["data.batch_size=2", "data.grad_accum_steps=2", f"run.out_dir={h}",
                                    "checkpoint.resume=auto"])
check(rc_a == 0 and rc_b == 0 and rc_c == 0 and "the global batch changed" in out_c,
      f"another global batch on resume is named ({err_a[-200:]} {err_b[-200:]} {err_c[-200:]})")
if rc_a == 0 and rc_c == 0:
    la, lc = dict(losses(u)), dict(losses(h))
    ratio = lc.get(8, float("inf")) / la.get(8, 1.0)
    check(0.85 < ratio < 1.15, f"the loss logged at step 8 after the resume is {ratio:.3f}x the uninterrupted run's "
                               "(steps 5-6 weighed like 7-8)")

# The MLP (the seed lecture's Linear(10, 1) on synthetic regression, MSE), FP32: 4 x 4 == 16.
seed = source("configs", "seed_dynamic.yaml")
mlp = {}
for tag, sets in (("mlp16", ["data.batch_size=16"]), ("mlp4x4", ["data.batch_size=4", "data.grad_accum_steps=4"])):
    d = os.path.join(base, tag)
    rc, _, err = run(seed, sets + ["precision.compute=fp32", "run.steps=30", "run.log_interval=1", f"run.out_dir={d}"])
    check(rc == 0, f"{tag}: exit 0 ({err.strip()[-300:]})")
    mlp[tag] = losses(d) if rc == 0 else []
if all(mlp.values()):
    a, b = mlp["mlp16"], mlp["mlp4x4"]
    worst = max(abs(x[1] - y[1]) / abs(x[1]) for x, y in zip(a, b)) if len(a) == len(b) == 30 else float("inf")
    check(worst < 1e-5, f"MLP: 4 x 4 micro-batches == 16 in FP32 (max relative loss difference {worst:.3g} < 1e-5)")

rc, _, err = run(cfg, ["data.grad_accum_steps=0", f"run.out_dir={os.path.join(base, 'bad')}"])
check(rc != 0 and "data.grad_accum_steps" in err, f"grad_accum_steps 0 is refused, naming the key ({rc}: {err.strip()[-200:]})")
done()
