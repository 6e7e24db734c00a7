"""Data parallelism is exact: 2 ranks x batch B reproduce 1 rank x batch 2B (same samples per step).
FP32 within 1e-5 relative loss over 50 steps; FP16 within 1e-2 and BF16 within 2e-2 (the 16-bit
gradients are rounded once per rank and again after the sum, so the runs drift apart slowly)."""
import os
from e2e_util import check, done, losses, run, source, summary, tmpdir

base = tmpdir()
cfg = source("configs", "fmnist_mlp_fp16.yaml")
common = ["run.steps=50", "run.log_interval=1", "run.progress=off", 'data.eval_images=""', 'data.eval_labels=""']
tolerance = {"fp32": 1e-5, "fp16": 1e-2, "bf16": 2e-2}
for prec, tol in tolerance.items():
    one, two = os.path.join(base, prec + "_1"), os.path.join(base, prec + "_2")
    rc1, _, err1 = run(cfg, common + [f"precision.compute={prec}", "data.batch_size=64", f"run.out_dir={one}"])
    rc2, _, err2 = run(cfg, common + [f"precision.compute={prec}", "data.batch_size=32", f"run.out_dir={two}"], np=2)
    check(rc1 == 0 and rc2 == 0, f"{prec}: both runs succeed ({err1.strip()[-200:]} {err2.strip()[-200:]})")
    if rc1 or rc2:
        continue
    a, b = losses(one), losses(two)
    check(len(a) == 50 and len(b) == 50, f"{prec}: 50 logged losses each")
    worst = max(abs(x[1] - y[1]) / abs(x[1]) for x, y in zip(a, b))
    check(worst < tol, f"{prec}: max relative loss difference {worst:.3g} < {tol:g}")
    s1, s2 = summary(one), summary(two)
    check(s1["global_batch"] == s2["global_batch"] == 64, f"{prec}: same global batch")
    check(s2["world_size"] == 2 and s2["allreduce_bytes_per_step"] > 0, f"{prec}: 2 ranks all-reduced gradients")
done()
