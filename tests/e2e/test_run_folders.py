"""Run folders with an identity (hostile round three, "data lost"): every run has a run id (run.json,
checkpoint headers, metrics.jsonl start records, summary.json), and a folder holds one run at a time.
- The same command twice (the README's main job rerun): the second run starts fresh, the first
  run's files and checkpoints are kept apart in previous/<its id>/, and resume=auto then continues
  the second run (it continued the old one, whose checkpoints also won the keep-rotation and
  deleted the new run's as they were written);
- a second run whose checkpoint.dir lies in a running run's out_dir is refused (the lock covers the
  checkpoint folder); afterwards, pointing a fresh run at another run's checkpoint folder is
  refused naming that run, and the first run's resume=auto continues its own checkpoints;
- two roll-backs into the same folder keep both sets of abandoned checkpoints."""
import glob
import json
import os
import subprocess
import time
from e2e_util import args, check, done, metrics, run, source, summary, tmpdir

base = tmpdir()
cfg = os.path.join(base, "small.yaml")
with open(cfg, "w") as f:
    f.write("run: {name: folders, steps: 40, log_interval: 10, progress: off}\n"
            "model: {hidden: [16]}\n"
            "data: {format: synthetic, batch_size: 8, synthetic: {train_samples: 512, eval_samples: 64}}\n"
            "precision: {compute: fp32}\n"
            "optimizer: {type: adamw, lr: 0.003}\n"
            "checkpoint: {interval: 10, keep: 2}\n")


def run_id(out):
    return json.load(open(os.path.join(out, "run.json")))["run_id"]


def ckpt_steps(d):
    return sorted(int(os.path.basename(p)[9:-4]) for p in glob.glob(os.path.join(d, "ckpt_step*.bin")))


# The same command twice; the first run trained further (60 steps) than the second (40).
out = os.path.join(base, "main")
rc1, _, e1 = run(cfg, [f"run.out_dir={out}", "run.steps=60"])
first = run_id(out) if rc1 == 0 else None
rc2, o2, e2 = run(cfg, [f"run.out_dir={out}"])
second = run_id(out) if rc2 == 0 else None
prev = os.path.join(out, "previous", first or "?")
check(rc1 == 0 and rc2 == 0 and first and second and first != second, f"two fresh runs, two ids ({first}, {second})")
check("moved its metrics.jsonl" in o2 and os.path.exists(os.path.join(prev, "metrics.jsonl")) and
      ckpt_steps(os.path.join(prev, "checkpoints")) == [50, 60],
      f"the first run's files and checkpoints are in previous/{first}/ ({ckpt_steps(os.path.join(prev, 'checkpoints'))})")
check(ckpt_steps(os.path.join(out, "checkpoints")) == [30, 40],
      f"the second run keeps its own newest 2 checkpoints ({ckpt_steps(os.path.join(out, 'checkpoints'))})")
s = summary(out)
starts = [m for m in metrics(out) if m.get("event")]
check(s.get("run_id") == second and starts and starts[0]["run_id"] == second and all("time" in m for m in metrics(out)),
      "summary.json and metrics.jsonl name the run; every record carries its time")
rc3, o3, e3 = run(cfg, [f"run.out_dir={out}", "checkpoint.resume=auto", "run.steps=50"])
check(rc3 == 0 and "at step 40" in o3 and run_id(out) == second and summary(out)["run_id"] == second,
      f"resume=auto continues the second run from step 40 ({o3.strip().splitlines()[:1]})")

# A second run with checkpoint.dir inside a running run's out_dir: refused by the lock.
a = os.path.join(base, "a")
b = os.path.join(base, "b")
slow = [f"run.out_dir={a}", "run.steps=100000", "checkpoint.interval=1000"]
pa = subprocess.Popen([args().binary, cfg] + [x for s_ in slow for x in ("--set", s_)], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
for _ in range(300):
    if os.path.exists(os.path.join(a, "run.json")):
        break
    time.sleep(0.05)
rc, o, e = run(cfg, [f"run.out_dir={b}", f"checkpoint.dir={a}/checkpoints"])
check(rc == 2 and "checkpoint.dir" in e and "another run is using this folder" in e,
      f"a run writing into a running run's checkpoint folder is refused ({rc}: {e.strip()[-200:]})")
pa.send_signal(2)  # SIGINT: checkpoint and stop
pa.communicate(timeout=120)
a_id, a_steps = run_id(a), ckpt_steps(os.path.join(a, "checkpoints"))
# Sequentially: a fresh run pointed at run a's checkpoint folder is refused naming run a.
rc, o, e = run(cfg, [f"run.out_dir={b}", f"checkpoint.dir={a}/checkpoints"])
check(rc == 2 and f"holds {len(a_steps)} checkpoint(s) of run {a_id}" in e,
      f"a fresh run pointed at another run's checkpoint folder is refused naming it ({rc}: {e.strip()[-220:]})")
check(ckpt_steps(os.path.join(a, "checkpoints")) == a_steps, "run a's checkpoints are untouched")
rc, o, e = run(cfg, [f"run.out_dir={a}", "checkpoint.resume=auto", f"run.steps={a_steps[-1] + 5}"])
check(rc == 0 and f"at step {a_steps[-1]}" in o and run_id(a) == a_id, f"run a continues its own checkpoints ({rc})")

# Two roll-backs into one folder: both sets of abandoned checkpoints are kept.
rb = os.path.join(base, "rollback")
rc, _, _ = run(cfg, [f"run.out_dir={rb}", "checkpoint.keep=10"])
ck = os.path.join(rb, "checkpoints")
rc1, o1, _ = run(cfg, [f"run.out_dir={rb}", "checkpoint.keep=10", f"checkpoint.resume={ck}/ckpt_step0000000020.bin"])
time.sleep(1.1)  # the roll-back folders are named by the second
rc2, o2, _ = run(cfg, [f"run.out_dir={rb}", "checkpoint.keep=10", f"checkpoint.resume={ck}/ckpt_step0000000010.bin"])
sets = sorted(glob.glob(os.path.join(ck, "abandoned", "*")))
kept = [ckpt_steps(d) for d in sets]
check(rc == rc1 == rc2 == 0 and len(sets) == 2 and kept == [[30, 40], [20, 30, 40]],
      f"two roll-backs: two abandoned folders, nothing overwritten ({[os.path.basename(d) for d in sets]}: {kept})")
done()
