"""model.recompute block: only each block's input is kept for backward and the rest is computed
again inside it, so the run is the same bit for bit: a tiny GPT on 2 ranks in FP16 with dynamic
loss scaling and a planted overflow (faults.inject_nonfinite) logs the same losses, scales and
skipped steps and ends with the same params_hash and optimizer_state_hash with recomputation as
without, and allocates fewer activation bytes (the start-up line, summary.json)."""
import os
import re
from e2e_util import check, done, records, run, summary, tmpdir, tiny_gpt_config

base = tmpdir()
cfg = tiny_gpt_config(base)
common = ["precision.compute=fp16", "model.n_layer=3", "run.steps=30", "sample.tokens=0",
          'faults.inject_nonfinite=[{step: 7, rank: 1, tensor: h.0.attn.qkv.weight, value: inf}]']
out = {}
for mode in ("none", "block"):
    d = os.path.join(base, mode)
    rc, o, e = run(cfg, common + [f"model.recompute={mode}", f"run.out_dir={d}"], np=2)
    m = re.search(r"activations ([\d.]+ \w+) \((\d+) windows", o)
    out[mode] = (rc, d, summary(d) if rc == 0 else {}, m.group(1) if m else None, o + e)
    check(rc == 0 and "step 7: non-finite gradients in h.0.attn.qkv.weight on rank 1" in o + e,
          f"recompute {mode}: trained with the planted overflow skipped ({rc}: {(o + e).strip()[-300:]})")
(_, dn, sn, an, _), (_, db, sb, ab, _) = out["none"], out["block"]
check(sn and sb and sn["params_hash"] == sb["params_hash"] and sn["optimizer_state_hash"] == sb["optimizer_state_hash"] and
      sn["skipped_steps"] == sb["skipped_steps"] == 1,
      f"the same params_hash and optimizer_state_hash ({sn.get('params_hash')} / {sb.get('params_hash')})")
check(sn and sb and records(dn) == records(db), "every logged loss, scale, skip and evaluation is the same")
check(sn and sb and sb["memory_per_rank"]["activations"] < sn["memory_per_rank"]["activations"],
      f"fewer activation bytes with recompute ({an} vs {ab})")
done()
