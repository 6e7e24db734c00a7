"""A checkpoint continues in another compute precision (the masters and optimizer moments are
FP32): fp16 -> bf16 -> fp32 resumes run on, say what changed, and end within a few percent of the
uninterrupted fp16 run's loss; the working copy is cast from the masters anew."""
import json
import os
from e2e_util import check, done, run, tiny_gpt_config, tmpdir

base = tmpdir()
cfg = tiny_gpt_config(base)
common = ["run.eval_interval=0", "sample.tokens=0", "checkpoint.final=true", "run.log_interval=5"]


def last_loss(out):
    return [json.loads(line)["loss"] for line in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in line][-1]


whole = os.path.join(base, "whole")
rc, o, e = run(cfg, [f"run.out_dir={whole}", "run.steps=30", "precision.compute=fp16"] + common)
check(rc == 0, f"the uninterrupted fp16 run ({rc}: {e.strip()[-200:]})")
split = os.path.join(base, "split")
rc1, o1, e1 = run(cfg, [f"run.out_dir={split}", "run.steps=10", "precision.compute=fp16"] + common)
rc2, o2, e2 = run(cfg, [f"run.out_dir={split}", "run.steps=20", "precision.compute=bf16", "checkpoint.resume=auto"] + common)
rc3, o3, e3 = run(cfg, [f"run.out_dir={split}", "run.steps=30", "precision.compute=fp32", "checkpoint.resume=auto"] + common)
check(rc1 == rc2 == rc3 == 0 and "written with fp16 compute, this run computes in bf16" in o2 and
      "written with bf16 compute, this run computes in fp32" in o3 and "at step 20" in o3,
      f"fp16 -> bf16 -> fp32: each resume runs on and says so ({rc2}: {(o2 + e2).strip()[-300:]}; {rc3}: {(o3 + e3).strip()[-300:]})")
a, b = last_loss(whole), last_loss(split)
check(abs(a - b) < 0.05 * a, f"the last logged loss {b:.4f} is within 5% of the uninterrupted run's {a:.4f}")
done()
