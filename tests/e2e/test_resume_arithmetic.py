"""Resume arithmetic and accounting (hostile round three): a run.epochs run stopped on 2 ranks and
resumed on 1 or 3 ranks (another global batch) trains exactly its epochs, its logged and
checkpointed epoch never jumps or goes back, resuming at 2.x of 3 epochs on more ranks is not
refused, and the summary's throughput counts the samples really trained; a summary reports no
loss it did not measure (stopped before the first log line), keeps the one it did (resumed at the
last step) and a wall
time that covers the training time; a shorter growth_interval on resume still grows the scale."""
import os
from e2e_util import check, done, metrics, run, summary, tmpdir

base = tmpdir()
cfg = os.path.join(base, "epochs.yaml")
with open(cfg, "w") as f:  # 1000 samples: 1000 // 32 = 31 steps per epoch on 2 ranks x 16
    f.write("run: {name: epochs, steps: 0, epochs: 3, log_interval: 5, progress: off}\n"
            "model: {hidden: [16]}\n"
            "data: {format: synthetic, batch_size: 16, synthetic: {train_samples: 1000, eval_samples: 64}}\n"
            "precision: {compute: fp32}\n"
            "optimizer: {type: adamw, lr: 0.003}\n")


def epochs_logged(out):
    return [m["epoch"] for m in metrics(out) if "epoch" in m]


# Uninterrupted: 3 epochs of 31 steps on 2 ranks x 16.
ref = os.path.join(base, "ref")
rc, out, err = run(cfg, [f"run.out_dir={ref}"], np=2)
s = summary(ref)
check(rc == 0 and s["steps"] == 93 and s["epochs"] == 3.0, f"reference: 93 steps = 3.0 epochs ({s.get('steps')}, {s.get('epochs')})")

for np_after in (1, 3):
    cut = os.path.join(base, f"cut{np_after}")
    # Stopped after step 70 (2.26 epochs) on 2 ranks.
    rc, out, err = run(cfg, [f"run.out_dir={cut}", "faults.raise_signal=[{step: 70, rank: 0}]"], np=2)
    check(rc == 0 and summary(cut)["steps"] == 70, f"stopped at step 70 of 93 ({err[-200:]})")
    # Resumed on np_after ranks with the same per-rank batch: another global batch.
    rc, out, err = run(cfg, [f"run.out_dir={cut}", "checkpoint.resume=auto"], np=np_after)
    s = summary(cut)
    check(rc == 0, f"resumed on {np_after} rank(s) at 2.26 of 3 epochs is accepted (rc {rc}: {err[-300:]})")
    if rc != 0:
        continue
    check(s["epochs"] == 3.0, f"on {np_after} rank(s): ends at exactly 3.0 epochs ({s['epochs']})")
    e = epochs_logged(cut)
    check(all(b >= a for a, b in zip(e, e[1:])) and e[-1] == 3.0,
          f"on {np_after} rank(s): the logged epoch never goes back and ends at 3.0 ({e[-4:]})")
    gb = 16 * np_after
    # Step 70 is 8 batches into epoch 2 (31 per epoch): it continues at sample 8 x 32 = 256, and the
    # third epoch ends after the (1000 - 256) // gb whole batches left in it.
    rest = (1000 - 256) // gb
    check(s["steps"] == 70 + rest, f"on {np_after} rank(s): {70 + rest} steps in all (70 + {rest}), got {s['steps']}")
    want_samples = 70 * 32 + rest * gb
    check(s["samples"] == want_samples, f"on {np_after} rank(s): {want_samples} samples trained, summary says {s['samples']}")
    check(abs(s["samples_per_second"] * s["train_seconds"] - s["samples"]) < 1e-6 * s["samples"] + 1,
          "samples/s is the samples trained over the training time")
    check(s["wall_seconds"] >= s["train_seconds"], f"wall time {s['wall_seconds']:.3f} s covers training time {s['train_seconds']:.3f} s")

# A summary reports no loss the run did not measure, and keeps the one it did: resumed at the last
# step, the final loss is the one the run logged before, carried in the checkpoint (hostile round
# seven: it was dropped).
atend = os.path.join(base, "ref")
measured = summary(atend).get("final_loss")
rc, out, err = run(cfg, [f"run.out_dir={atend}", "checkpoint.resume=auto"], np=2)
s = summary(atend)
check(rc == 0 and "nothing left to train" in out and measured is not None and s.get("final_loss") == measured,
      f"resumed at the last step: the run's measured final_loss stays in the summary ({measured} -> {s.get('final_loss')})")
early = os.path.join(base, "early")
rc, out, err = run(cfg, [f"run.out_dir={early}", "run.log_interval=50", "faults.raise_signal=[{step: 3, rank: 0}]"], np=2)
s = summary(early)
check(rc == 0 and "final_loss" not in s and s["wall_seconds"] >= s["train_seconds"],
      f"stopped before the first log line: no final_loss ({s.get('final_loss')}), wall >= train")

# A shorter growth_interval on resume: the scale grows again (it stayed at its value forever).
g = os.path.join(base, "growth")
with open(os.path.join(base, "growth.yaml"), "w") as f:
    f.write("run: {name: growth, steps: 60, log_interval: 1, progress: off}\n"
            "model: {hidden: [16]}\n"
            "data: {format: synthetic, batch_size: 16, synthetic: {train_samples: 1000, eval_samples: 64}}\n"
            "precision: {compute: fp16, loss_scale: {mode: dynamic, init_scale: 1, growth_interval: 2000}}\n"
            "optimizer: {type: adamw, lr: 0.003}\n")
rc, out, err = run(os.path.join(base, "growth.yaml"), [f"run.out_dir={g}", "run.steps=30"])
rc, out, err = run(os.path.join(base, "growth.yaml"),
                   [f"run.out_dir={g}", "checkpoint.resume=auto", "precision.loss_scale.growth_interval=5"])
scales = [m["scale"] for m in metrics(g) if "scale" in m and m["step"] > 30]
check(rc == 0 and "growth tracker 30 -> 4 (growth_interval)" in out and scales[0] == 2.0 and scales[-1] == 2.0 ** 6,
      f"growth_interval 2000 -> 5 at step 30: the scale grows at step 31 and every 5 steps after (2^6 by step 60) ({scales[:3]} ... {scales[-1]})")
done()
