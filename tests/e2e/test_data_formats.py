"""Every data source trains end to end: CSV classification (header, target by name, held-out
fraction) and regression (target by index, separate eval file), the seed lecture's synthetic
regression with static and dynamic scaling, and Fashion-MNIST IDX (gzip) for a few steps."""
import os
import random
from e2e_util import check, done, run, source, summary, tmpdir

d = tmpdir()
rng = random.Random(5)

# Classification: the class is which of 3 cluster centres a point is drawn around (learnable).
centres = [(-2.0, 0.0, 1.0), (2.0, 1.0, -1.0), (0.0, -2.0, 0.5)]
with open(os.path.join(d, "cls.csv"), "w") as f:
    f.write("x1,label,x2,x3\n")
    for i in range(600):
        c = i % 3
        x = [m + rng.gauss(0, 0.5) for m in centres[c]]
        f.write(f"{x[0]:.5f},{c},{x[1]:.5f},{x[2]:.5f}\n")
out = os.path.join(d, "cls")
rc, so, se = run(source("configs", "fmnist_mlp_fp16.yaml"),
                 ["data.format=csv", f"data.train_csv={d}/cls.csv", "data.target=label", "data.eval_fraction=0.2",
                  "data.normalize=per_feature", "model.hidden=[16]", "data.batch_size=16", "run.epochs=20",
                  "run.progress=off", f"run.out_dir={out}"])
s = summary(out) if rc == 0 else {}
check(rc == 0 and s.get("eval_accuracy", 0) > 0.95, f"CSV classification learns: {s.get('eval_accuracy')} ({se[-300:]})")

# Regression: y = 3 x0 - x1 + 0.5, target in column 0, a separate evaluation file, no header.
for name, n in (("reg_train.csv", 800), ("reg_eval.csv", 200)):
    with open(os.path.join(d, name), "w") as f:
        for _ in range(n):
            a, b = rng.uniform(-1, 1), rng.uniform(-1, 1)
            f.write(f"{3 * a - b + 0.5 + rng.gauss(0, 0.01):.6f},{a:.6f},{b:.6f}\n")
out = os.path.join(d, "reg")
rc, so, se = run(source("configs", "fmnist_mlp_fp16.yaml"),
                 ["data.format=csv", "data.task=regression", "data.csv_header=false", "data.target=0",
                  f"data.train_csv={d}/reg_train.csv", f"data.eval_csv={d}/reg_eval.csv", "model.hidden=[]",
                  "data.batch_size=16", "run.epochs=30", "optimizer.lr=0.05", "run.progress=off", f"run.out_dir={out}"])
s = summary(out) if rc == 0 else {}
check(rc == 0 and s.get("eval_loss", 1) < 5e-3, f"CSV regression fits: eval mse {s.get('eval_loss')} ({se[-300:]})")

# The seed lecture's configs.
for name in ("seed_static", "seed_dynamic"):
    out = os.path.join(d, name)
    rc, so, se = run(source("configs", name + ".yaml"), ["run.progress=off", f"run.out_dir={out}"])
    s = summary(out) if rc == 0 else {}
    check(rc == 0 and s.get("eval_loss", 1) < 0.02, f"{name}: eval mse {s.get('eval_loss')} near the noise floor 0.01")
    if name == "seed_dynamic" and rc == 0:
        check(s["final_scale"] > 1 and s["skipped_steps"] > 0, f"seed_dynamic grew its scale to {s['final_scale']:g} and skipped {s['skipped_steps']} overflowing steps")
    if name == "seed_static" and rc == 0:
        check(s["final_scale"] == 128, "seed_static keeps its scale of 128")

# Fashion-MNIST from the gzip IDX files, a few steps, with telemetry.
out = os.path.join(d, "fmnist")
rc, so, se = run(source("configs", "fmnist_mlp_bf16.yaml"), ["run.steps=60", "run.progress=off", "precision.telemetry_interval=30",
                                                             "model.hidden=[64]", f"run.out_dir={out}"])
s = summary(out) if rc == 0 else {}
check(rc == 0 and s.get("eval_accuracy", 0) > 0.6, f"Fashion-MNIST IDX trains: {s.get('eval_accuracy')}")
done()
