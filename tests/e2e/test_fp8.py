"""precision.compute fp8 end to end (the CPU emulation):
  1. the shipped character GPT (configs/gpt_fortunes_bf16.yaml, shortened to 200 steps) trains in
     FP8 to an evaluation loss within 2% of BF16's; with precision.fp8.scaling none (every scale 1)
     the output gradients' E5M2 casts flush most values to zero (the FP16-underflow lesson again);
     summary.json reports every FP8 tensor with a power-of-two scale, and its histories saw every step;
  2. a resumed FP8 run continues bit for bit (its scales and amax histories are in the checkpoint);
  3. on 2 ranks with different data, the ranks' FP8 scales and histories agree after every step
     (distributed.hash_interval 1); an infinity planted into an E5M2 output gradient on rank 1 (before
     its cast) and a NaN into a weight gradient on rank 0 are skipped on every rank, the first named
     by its FP8 operand, and leave the histories alone; recomputation gives the same bits; the run
     resumes on 1 rank (elastic) with its histories; `amp_ddp eval` of its final checkpoint computes
     in FP8 with the scales the run ended with: the run's final evaluation loss;
  4. the MLP trains in FP8 too (within 15% of BF16's mse on the seed's regression at its noise
     floor), its three layers' tensors reported."""
import glob
import os
import re
from e2e_util import check, done, losses, records, run, source, summary, tmpdir, tiny_gpt_config

base = tmpdir()
FORTUNES = source("configs", "gpt_fortunes_bf16.yaml")
short = ["run.steps=200", "run.eval_interval=200", "run.sample_interval=0", "sample.tokens=0", "run.log_interval=50",
         "checkpoint.final=false", "run.progress=off", "run.threads=1"]

# 1. FP8 against BF16 on the shipped text config.
res = {}
for name, sets in (("bf16", ["precision.compute=bf16"]), ("fp8", ["precision.compute=fp8"]),
                   ("fp8_unscaled", ["precision.compute=fp8", "precision.fp8.scaling=none"])):
    d = os.path.join(base, name)
    rc, o, e = run(FORTUNES, short + sets + [f"run.out_dir={d}"], timeout=900)
    check(rc == 0, f"{name}: trains ({rc}: {(o + e).strip()[-400:]})")
    res[name] = summary(d) if rc == 0 else {}
if all(res.values()):
    b, f, u = res["bf16"]["eval_loss"], res["fp8"]["eval_loss"], res["fp8_unscaled"]["eval_loss"]
    print(f"eval loss after 200 steps: bf16 {b:.5f}, fp8 {f:.5f} ({100 * (f / b - 1):+.2f}%), "
          f"fp8 without scaling {u:.5f} ({100 * (u / b - 1):+.2f}%)")
    check(abs(f / b - 1) < 0.02, f"FP8 within 2% of BF16 ({f:.5f} vs {b:.5f})")
    rep = res["fp8"]["fp8"]
    check(res["fp8"]["precision"] == "fp8" and rep["scaling"] == "delayed" and rep["amax_history"] == 16,
          "summary.json names the precision and the recipe")
    check(len(rep["tensors"]) == 4 * 4 * 3, f"every block's four linear layers have three FP8 tensors ({len(rep['tensors'])})")
    check(all(t["scale"] > 0 and (t["scale"]).hex().startswith(("0x1.0000000000000p", "0x1p")) for t in rep["tensors"]),
          "every scale is a power of two")
    check(rep["steps_recorded"] == res["fp8"]["optimizer_steps"] == 200, "the histories saw every step")
    grads = lambda r: [t for t in r["fp8"]["tensors"] if t["name"].endswith(".grad_output")]
    check(all(t["format"] == "e5m2" for t in grads(res["fp8"])), "output gradients are E5M2")
    scaled = max(t["flushed_share"] for t in grads(res["fp8"]))
    unscaled = min(t["flushed_share"] for t in grads(res["fp8_unscaled"]))
    print(f"output gradients flushed to zero: at most {scaled:.4f} with delayed scaling, at least {unscaled:.4f} without")
    check(unscaled > 0.5 and scaled < 0.05,
          f"without scaling most output gradients flush to zero ({unscaled:.3f}), with it few do ({scaled:.4f})")
    check(all(t["scale"] == 1.0 for t in res["fp8_unscaled"]["fp8"]["tensors"]), "scaling none keeps every scale at 1")

# 2. Bit-exact resume.
cfg = tiny_gpt_config(base)
fp8 = ["precision.compute=fp8", "precision.fp8.amax_history=4", "sample.tokens=0"]
whole, half = os.path.join(base, "whole"), os.path.join(base, "half")
rc1, o1, e1 = run(cfg, fp8 + [f"run.out_dir={whole}"])
rc2, o2, e2 = run(cfg, fp8 + ["run.steps=15", "checkpoint.final=true", f"run.out_dir={half}"])
rc3, o3, e3 = run(cfg, fp8 + ["checkpoint.resume=auto", f"run.out_dir={half}"])
check(rc1 == rc2 == rc3 == 0, f"uninterrupted, first half and resumed runs succeed ({rc1}, {rc2}, {rc3}: {(e3 or e2 or e1)[-300:]})")
if rc1 == rc2 == rc3 == 0:
    sw, sh = summary(whole), summary(half)
    check(sw["params_hash"] == sh["params_hash"] and sw["optimizer_state_hash"] == sh["optimizer_state_hash"],
          f"the resumed FP8 run ends bit for bit where the uninterrupted one does ({sw['params_hash']} / {sh['params_hash']})")
    check([t["scale"] for t in sw["fp8"]["tensors"]] == [t["scale"] for t in sh["fp8"]["tensors"]],
          "and with the same FP8 scales")
    check(losses(whole) == losses(half), "every logged training loss is the same")

# 3. Two ranks: the scales agree every step; planted overflows are skipped everywhere and named.
planted = ("faults.inject_nonfinite=[{step: 9, rank: 1, tensor: h.1.mlp.fc.grad_output, value: inf}, "
           "{step: 13, rank: 0, tensor: h.1.mlp.fc.weight, value: nan}]")
out = {}
for mode in ("none", "block"):
    d = os.path.join(base, "np2_" + mode)
    rc, o, e = run(cfg, fp8 + ["distributed.hash_interval=1", f"model.recompute={mode}", f"run.out_dir={d}",
                               "checkpoint.final=true", planted], np=2)
    out[mode] = (rc, d, o + e)
    log = o + e
    # Backward carries the infinity from h.1's fc on to every layer before it: the skip line names
    # the FP8 operand where it began (the first non-finite cast of the step).
    check(rc == 0 and "step 9: non-finite gradients in " in log and " on rank 1 | FP8 operand h.1.mlp.fc.grad_output "
          "(e5m2) not finite" in log and "step 13: non-finite gradients in h.1.mlp.fc.weight on rank 0 | step skipped "
          "on every rank" in log,
          f"2 ranks, recompute {mode}: the scales agree after every step and the planted overflows (E5M2 gradient, "
          f"weight gradient) are skipped and named ({rc}: {log.strip()[-600:]})")
if all(v[0] == 0 for v in out.values()):
    sn, sb = summary(out["none"][1]), summary(out["block"][1])
    check(sn["skipped_steps"] == 2 and sn["fp8"]["steps_recorded"] == 28,
          f"the skipped steps' amaxes are not recorded ({sn['fp8']['steps_recorded']} of 30 steps)")
    check(sn["params_hash"] == sb["params_hash"] and records(out["none"][1]) == records(out["block"][1]),
          "recomputation gives the same bits in FP8")
    # The eval command on the final checkpoint: FP8 with the run's last scales is the run's own
    # final evaluation (2 ranks: the same partial sums); bf16 compute of the same weights is not.
    ckpt = sorted(glob.glob(os.path.join(out["none"][1], "checkpoints", "ckpt_step*.bin")))[-1]
    ev = {}
    for prec in ("fp8", "bf16"):
        rc, o, e = run(cfg, [f"model.init_from={ckpt}", f"precision.compute={prec}"], np=2, command="eval")
        m = re.search(r"^eval loss (\S+) .* \| (\w+) compute \|", o, re.M)
        ev[prec] = (float(m.group(1)), m.group(2)) if rc == 0 and m else (None, f"{rc}: {(o + e).strip()[-300:]}")
    check(ev["fp8"][0] is not None and ev["fp8"][1] == "fp8" and abs(ev["fp8"][0] - sn["eval_loss"]) < 5e-6 and
          ev["bf16"][0] is not None and abs(ev["bf16"][0] - sn["eval_loss"]) > 5e-6,
          f"amp_ddp eval of the FP8 checkpoint computes in FP8 with its scales: the run's final eval loss "
          f"{sn['eval_loss']:.6f} (fp8 {ev['fp8']}, bf16 {ev['bf16']})")
    # Elastic: the 2-rank run continues on 1 rank with its FP8 histories (every rank held the same).
    rc, o, e = run(cfg, fp8 + ["run.steps=40", "checkpoint.resume=auto", f"run.out_dir={out['none'][1]}"])
    se = summary(out["none"][1]) if rc == 0 else {}
    check(rc == 0 and "elastic resume" in o + e and se.get("fp8", {}).get("steps_recorded") == 38,
          f"the 2-rank FP8 run resumes on 1 rank with its histories (28 + 10 steps recorded: "
          f"{se.get('fp8', {}).get('steps_recorded')}; {rc}: {(o + e).strip()[-300:]})")

# The shipped FP8 config (the held-out text of docs/benchmarks.md) plans without error.
rc, o, e = run(source("configs", "gpt_licenses_fp8.yaml"), extra=["--dry-run"])
check(rc == 0 and "834.3k" in o + e, f"configs/gpt_licenses_fp8.yaml plans ({rc}: {(o + e).strip()[-300:]})")

# 4. The MLP.
mlp = {}
for prec in ("bf16", "fp8"):
    d = os.path.join(base, "mlp_" + prec)
    rc, o, e = run(source("configs", "seed_dynamic.yaml"), [f"precision.compute={prec}", "run.steps=200",
                                                            "checkpoint.final=false", f"run.out_dir={d}"])
    check(rc == 0, f"mlp {prec}: trains ({rc}: {(o + e).strip()[-300:]})")
    mlp[prec] = summary(d) if rc == 0 else {}
if all(mlp.values()):
    names = [t["name"] for t in mlp["fp8"]["fp8"]["tensors"]]
    check(names[:3] == ["fc1.input", "fc1.weight", "fc1.grad_output"], f"the MLP's FP8 tensors: {names[:3]}...")
    b, f = mlp["bf16"]["eval_loss"], mlp["fp8"]["eval_loss"]
    print(f"mlp eval mse after 200 steps: bf16 {b:.5f}, fp8 {f:.5f}")
    # A regression at its noise floor (noise 0.1: mse 0.01) shows E4M3's 3 mantissa bits more than
    # the GPT's cross-entropy does: about 10% here.
    first = losses(os.path.join(base, "mlp_fp8"))[0][1]
    check(abs(f / b - 1) < 0.15 and f < 0.1 * first,
          f"the MLP in FP8 learns ({first:.4f} -> {f:.5f}), within 15% of BF16 ({b:.5f})")
done()
