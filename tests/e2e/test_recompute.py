"""model.recompute block (only each block's input kept for backward, the rest computed again
inside it), mlp (the MLP's fc and GELU outputs computed again inside backward) and attention (the
explicit attention's probabilities computed again inside backward): the run is the same bit for
bit. A tiny GPT on 2 ranks in FP16 with dynamic loss scaling and a planted overflow
(faults.inject_nonfinite) logs the same losses, scales and skipped steps and ends with the same
params_hash and optimizer_state_hash with each recomputation as without, and allocates fewer
activation bytes (the start-up line, summary.json): block fewer than mlp, mlp and attention fewer
than none. recompute attention with fused attention (no probabilities kept) is a config error."""
import os
import re
from e2e_util import check, done, records, run, summary, tmpdir, tiny_gpt_config

base = tmpdir()
cfg = tiny_gpt_config(base)
common = ["precision.compute=fp16", "model.n_layer=3", "run.steps=30", "sample.tokens=0",
          'faults.inject_nonfinite=[{step: 7, rank: 1, tensor: h.0.attn.qkv.weight, value: inf}]']
out = {}
for mode in ("none", "attention", "mlp", "block"):
    d = os.path.join(base, mode)
    rc, o, e = run(cfg, common + [f"model.recompute={mode}", f"run.out_dir={d}"], np=2)
    m = re.search(r"activations ([\d.]+ \w+) \((\d+) windows", o)
    out[mode] = (rc, d, summary(d) if rc == 0 else {}, m.group(1) if m else None, o + e)
    check(rc == 0 and "step 7: non-finite gradients in h.0.attn.qkv.weight on rank 1" in o + e,
          f"recompute {mode}: trained with the planted overflow skipped ({rc}: {(o + e).strip()[-300:]})")
(_, dn, sn, an, _) = out["none"]
for mode in ("attention", "mlp", "block"):
    (_, db, sb, ab, _) = out[mode]
    check(sn and sb and sn["params_hash"] == sb["params_hash"] and
          sn["optimizer_state_hash"] == sb["optimizer_state_hash"] and sn["skipped_steps"] == sb["skipped_steps"] == 1,
          f"{mode}: the same params_hash and optimizer_state_hash ({sn.get('params_hash')} / {sb.get('params_hash')})")
    check(sn and sb and records(dn) == records(db), f"{mode}: every logged loss, scale, skip and evaluation is the same")
sm, sb = out["mlp"][2], out["block"][2]
check(sn and sm and sb and sb["memory_per_rank"]["activations"] < sm["memory_per_rank"]["activations"] <
      sn["memory_per_rank"]["activations"],
      f"fewer activation bytes with recompute: none {an}, mlp {out['mlp'][3]}, block {out['block'][3]}")
sa = out["attention"][2]
check(sn and sa and sa["memory_per_rank"]["activations"] < sn["memory_per_rank"]["activations"],
      f"fewer activation bytes with recompute attention: none {an}, attention {out['attention'][3]}")
rc, o, e = run(cfg, common + ["model.recompute=attention", "model.attention=fused", f"run.out_dir={os.path.join(base, 'fused')}"])
check(rc == 2 and "model.recompute: attention recomputes the explicit path's probabilities" in e,
      f"recompute attention with fused attention: a config error naming model.recompute ({rc}: {e.strip()[-300:]})")
done()
