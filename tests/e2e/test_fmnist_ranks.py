"""Fashion-MNIST in FP16 with dynamic loss scaling on 2 ranks (64 samples each) reaches the
accuracy of 1 rank (128 samples) at the same global batch, within 0.3 points; both runs learn."""
import os
from e2e_util import check, done, run, source, summary, tmpdir

base = tmpdir()
cfg = source("configs", "fmnist_mlp_fp16.yaml")
common = ["run.epochs=2", "run.progress=off", "checkpoint.final=false"]
one, two = os.path.join(base, "np1"), os.path.join(base, "np2")
rc1, _, e1 = run(cfg, common + ["data.batch_size=128", f"run.out_dir={one}"])
rc2, _, e2 = run(cfg, common + ["data.batch_size=64", f"run.out_dir={two}"], np=2)
check(rc1 == 0 and rc2 == 0, f"both runs succeed ({e1[-300:]} {e2[-300:]})")
if rc1 == 0 and rc2 == 0:
    a, b = summary(one), summary(two)
    check(a["global_batch"] == b["global_batch"] == 128 and b["world_size"] == 2, "same global batch, 2 ranks")
    check(a["eval_accuracy"] > 0.86 and b["eval_accuracy"] > 0.86,
          f"both learn: {100 * a['eval_accuracy']:.2f}% and {100 * b['eval_accuracy']:.2f}% after 2 epochs")
    diff = 100 * abs(a["eval_accuracy"] - b["eval_accuracy"])
    check(diff <= 0.3, f"2 ranks within 0.3 points of 1 rank: {diff:.2f}")
done()
