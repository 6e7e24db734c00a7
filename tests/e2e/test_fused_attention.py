"""model.attention fused: the flash-attention op in a training run. A tiny GPT on 2 ranks in FP16
with dynamic loss scaling and a planted overflow (faults.inject_nonfinite): the fused run trains,
skips the planted step on both ranks, ends within 1% of the explicit run's final evaluation loss
(the two paths differ by the 16-bit rounding of the probabilities), keeps fewer activation bytes,
gives the same bits with activation recomputation, and resumes bit-exactly from a checkpoint taken
halfway (params_hash and optimizer_state_hash of the uninterrupted run)."""
import os
import re
from e2e_util import check, done, records, run, summary, tmpdir, tiny_gpt_config

base = tmpdir()
cfg = tiny_gpt_config(base)
common = ["precision.compute=fp16", "model.n_layer=2", "model.seq_len=96", "run.steps=24", "sample.tokens=0",
          "run.eval_interval=24", 'faults.inject_nonfinite=[{step: 7, rank: 1, tensor: h.0.attn.qkv.weight, value: inf}]']
out = {}
for name, extra in (("explicit", ["model.attention=explicit"]), ("fused", ["model.attention=fused"]),
                    ("fused_recompute", ["model.attention=fused", "model.recompute=block"])):
    d = os.path.join(base, name)
    rc, o, e = run(cfg, common + extra + [f"run.out_dir={d}"], np=2)
    out[name] = (rc, d, summary(d) if rc == 0 else {})
    check(rc == 0 and "step 7: non-finite gradients in h.0.attn.qkv.weight on rank 1" in o + e,
          f"{name}: trained with the planted overflow skipped ({rc}: {(o + e).strip()[-300:]})")
(_, de, se), (_, df, sf), (_, dr, sr) = out["explicit"], out["fused"], out["fused_recompute"]
check(se and sf and se["skipped_steps"] == sf["skipped_steps"] == 1, "one skipped step with either attention")
check(se and sf and abs(sf["eval_loss"] - se["eval_loss"]) <= 0.01 * se["eval_loss"],
      f"fused eval loss {sf.get('eval_loss')} within 1% of explicit {se.get('eval_loss')}")
check(se and sf and se["params_hash"] != sf["params_hash"], "the two paths are different computations")
check(se and sf and sf["memory_per_rank"]["activations"] < se["memory_per_rank"]["activations"],
      f"fewer activation bytes fused ({sf.get('memory_per_rank')} vs {se.get('memory_per_rank')})")
check(sf and sr and sf["params_hash"] == sr["params_hash"] and sf["optimizer_state_hash"] == sr["optimizer_state_hash"]
      and records(df) == records(dr), "fused with recomputation: the same records and hashes")

# Resume: the SIGTERM drill stops the run after step 12 (a checkpoint), resuming continues to 24:
# the uninterrupted fused run's bits.
d = os.path.join(base, "resumed")
fused = common + ["model.attention=fused", f"run.out_dir={d}"]
rc, o, e = run(cfg, fused + ["faults.raise_signal=[{step: 12, rank: 0}]"], np=2)
check(rc == 0 and "stopped after step 12" in o, f"fused run stopped after step 12 ({rc}: {(o + e).strip()[-300:]})")
rc, o, e = run(cfg, fused + ["checkpoint.resume=auto"], np=2)
sres = summary(d) if rc == 0 else {}
check(sf and sres and sres["params_hash"] == sf["params_hash"] and sres["optimizer_state_hash"] == sf["optimizer_state_hash"],
      f"resumed fused run: the uninterrupted hashes ({sres.get('params_hash')} / {sf.get('params_hash')})")
done()
