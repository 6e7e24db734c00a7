"""Checkpoints: a run stopped (SIGTERM drill) and resumed reproduces the uninterrupted run bit for
bit on 1 and 2 ranks, with overflows before and after the stop; a rank killed with SIGKILL ends
the job promptly with the rank named and the last checkpoint intact; corrupted, truncated and
mismatched checkpoints are clear errors and auto-resume falls back to the newest intact one."""
import glob
import json
import os
import signal
import subprocess
import time
from e2e_util import records, args, check, done, metrics, run, source, summary, tmpdir

base = tmpdir()
cfg = os.path.join(base, "small.yaml")
with open(cfg, "w") as f:
    f.write("run: {name: resume, steps: 60, log_interval: 1, progress: off}\n"
            "model: {hidden: [32, 16]}\n"
            "data: {format: synthetic, batch_size: 8, synthetic: {train_samples: 1024, eval_samples: 128}}\n"
            "precision: {compute: fp16, loss_scale: {mode: dynamic, init_scale: 4096, growth_interval: 8}}\n"
            "optimizer: {type: adamw, lr: 0.01}\n"
            "faults:\n  inject_nonfinite: [{step: 10, rank: 0}, {step: 45, rank: 0, tensor: fc2.weight, value: nan}]\n")

# log_interval 7: the stop at step 30 falls inside a log interval, whose per-rank loss sums the
# checkpoint must give back to each rank.
for np, li in ((None, 1), (2, 1), (2, 7), (4, 7)):
    tag = f"np={np or 1} log_interval={li}"
    ref, cut = os.path.join(base, f"ref{np}" + ("" if li == 1 else f"_li{li}")), os.path.join(base, f"cut{np}_li{li}")
    run_cfg = cfg
    if li != 1:
        run_cfg = os.path.join(base, f"small_li{li}.yaml")
        with open(cfg) as src, open(run_cfg, "w") as dst:
            dst.write(src.read().replace("log_interval: 1,", f"log_interval: {li},"))
    rc, _, err = run(run_cfg, [f"run.out_dir={ref}"], np=np)
    check(rc == 0, f"{tag}: reference run ({err[-300:]})")
    rc, out, err = run(run_cfg, [f"run.out_dir={cut}", "faults.raise_signal=[{step: 30, rank: 0}]"], np=np)
    s = summary(cut)
    check(rc == 0 and s.get("stopped_early") and s["steps"] == 30 and "stopped after step 30" in out,
          f"{tag}: the SIGTERM drill stops after step 30 with exit 0 ({err[-300:]})")
    check(any(m.get("skipped") == 1 for m in metrics(cut)) or li != 1, f"{tag}: an overflow happened before the stop")
    rc, out, err = run(run_cfg, [f"run.out_dir={cut}", "checkpoint.resume=auto"], np=np)
    check(rc == 0 and "resumed from" in out and "at step 30" in out, f"{tag}: resumed at step 30 ({err[-300:]})")
    a, b = records(ref), records(cut)
    check(a == b, f"{tag}: every logged loss, scale and skip count identical ({len(a)} vs {len(b)} records)")
    sa, sb = summary(ref), summary(cut)
    check(sa["params_hash"] == sb["params_hash"] and sa["skipped_steps"] == sb["skipped_steps"] == 2,
          f"{tag}: params_hash {sa['params_hash']} == {sb['params_hash']}, 2 skipped steps each")

# ---- a checkpoint beyond the run's steps is refused; one at its last step has nothing left to do
ref_final = os.path.join(base, "ref2", "checkpoints", "ckpt_step0000000060.bin")
rc, out, err = run(cfg, [f"run.out_dir={os.path.join(base, 'beyond')}", "run.steps=30", f"checkpoint.resume={ref_final}"], np=2)
check(rc == 4 and "at step 60, beyond this run's 30 steps" in err, f"resume beyond run.steps: exit {rc} ({err[-300:]})")
rc, out, err = run(cfg, [f"run.out_dir={os.path.join(base, 'atend')}", f"checkpoint.resume={ref_final}"], np=2)
check(rc == 0 and "nothing left to train" in out, f"resume at the last step: exit {rc}, says so ({out[-300:]})")

# ---- roll-back: resuming from an older checkpoint sets the newer ones aside, so resume=auto later
# continues this line, not the abandoned one
lin = os.path.join(base, "lineage")
rc, _, err = run(cfg, [f"run.out_dir={lin}", "checkpoint.interval=20", "checkpoint.keep=5"])
lck = os.path.join(lin, "checkpoints")
first_line = {f: open(os.path.join(lin, f)).read() for f in ("summary.json", "config.yaml", "metrics.jsonl")}
rc, out, err = run(cfg, [f"run.out_dir={lin}", "checkpoint.interval=20", "checkpoint.keep=5",
                         f"checkpoint.resume={os.path.join(lck, 'ckpt_step0000000020.bin')}",
                         "faults.raise_signal=[{step: 30, rank: 0}]"])
aband = glob.glob(os.path.join(lck, "abandoned", "*-step20"))
check(rc == 0 and "moved 2 checkpoint(s) newer than step 20" in out and "summary.json and config.yaml kept in" in out
      and [sorted(os.listdir(d)) for d in aband] ==
      [["ckpt_step0000000040.bin", "ckpt_step0000000060.bin", "config.yaml", "metrics.jsonl", "summary.json"]],
      f"roll-back to step 20 moves 40 and 60 to abandoned/<time>-step20/ with the line's summary, config and "
      f"later records ({out[-400:]} {err[-200:]})")
# Nothing of the replaced line is lost: its summary and config as they were, and its records after
# step 20 beside its checkpoints, those up to step 20 still in the run's metrics.jsonl.
if aband:
    cut_records = [json.loads(l) for l in open(os.path.join(aband[0], "metrics.jsonl"))]
    old_records = [json.loads(l) for l in first_line["metrics.jsonl"].splitlines()]
    live = [json.loads(l) for l in open(os.path.join(lin, "metrics.jsonl"))]
    upto20 = lambda rs: [r for r in rs if "loss" in r and r["step"] <= 20]
    check(all(open(os.path.join(aband[0], f)).read() == first_line[f] for f in ("summary.json", "config.yaml")) and
          cut_records == [r for r in old_records if r.get("step", 0) > 20] and cut_records and
          upto20(live) == upto20(old_records) and upto20(live),
          f"the replaced line's summary.json and config.yaml kept as they were, its records after step 20 moved beside "
          f"its checkpoints ({len(cut_records)} records)")
rc, out, err = run(cfg, [f"run.out_dir={lin}", "checkpoint.interval=20", "checkpoint.keep=5", "checkpoint.resume=auto"])
check(rc == 0 and "ckpt_step0000000030.bin at step 30" in out, f"resume=auto continues the new line at step 30 ({out[-300:]})")

# ---- a changed loss-scale mode on resume applies, and says so
mode_dir = os.path.join(base, "mode")
rc, out, err = run(cfg, [f"run.out_dir={mode_dir}", "faults.raise_signal=[{step: 30, rank: 0}]"])
rc, out, err = run(cfg, [f"run.out_dir={mode_dir}", "checkpoint.resume=auto", "precision.loss_scale.mode=static",
                         "precision.loss_scale.init_scale=128"])
after = [m for m in metrics(mode_dir) if m.get("step", 0) > 30 and "scale" in m and "loss" in m]
check(rc == 0 and "loss scaling was dynamic" in out and "this run's is static (scale 128)" in out
      and after and all(m["scale"] == 128 for m in after),
      f"dynamic -> static on resume: applied from step 31 ({out[-300:]})")

# ---- a rank killed with SIGKILL: the job ends promptly, the rank is named, the checkpoint survives
kill_dir = os.path.join(base, "kill")
long_cfg = [f"run.out_dir={kill_dir}", "run.steps=100000", "checkpoint.interval=200", "data.synthetic.train_samples=4096"]
cmd = [source("scripts", "mpirun.sh"), "-np", "2", args().binary, cfg] + [a for s in long_cfg for a in ("--set", s)]
env = dict(os.environ, OMP_NUM_THREADS="1")
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
ckdir = os.path.join(kill_dir, "checkpoints")
deadline = time.time() + 120
while time.time() < deadline and len(glob.glob(os.path.join(ckdir, "ckpt_*.bin"))) < 2:
    time.sleep(0.2)
victim = None
# The ranks are children of mpirun, which scripts/mpirun.sh starts in a session of its own.
mpirun_pids = subprocess.run(["pgrep", "-P", str(p.pid), "-x", "mpirun"], capture_output=True, text=True).stdout.split()
for pid in subprocess.run(["pgrep", "-P", ",".join(mpirun_pids) or "0"], capture_output=True, text=True).stdout.split():
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if b"OMPI_COMM_WORLD_RANK=1\0" in f.read():
                victim = int(pid)
    except OSError:
        pass
check(victim is not None, "found rank 1's process")
t0 = time.time()
if victim:
    os.kill(victim, signal.SIGKILL)
try:
    out, err = p.communicate(timeout=60)
except subprocess.TimeoutExpired:
    p.kill()
    out, err = p.communicate()
elapsed = time.time() - t0
check(p.returncode != 0 and elapsed < 30, f"killed rank: job ended in {elapsed:.1f} s with exit {p.returncode}")
check("rank 1" in (out + err), "the message names rank 1")
ckpts = sorted(glob.glob(os.path.join(ckdir, "ckpt_*.bin")))
check(len(ckpts) >= 1, f"checkpoints survive ({len(ckpts)})")
# Resume past the newest checkpoint (a checkpoint beyond run.steps is refused).
newest = max(int(os.path.basename(p)[9:-4]) for p in ckpts) if ckpts else 0
rc, out, err = run(cfg, long_cfg[:1] + [f"run.steps={newest + 100}", "checkpoint.resume=auto", "checkpoint.interval=200",
                                        "data.synthetic.train_samples=4096"], np=2)
check(rc == 0 and "resumed from" in out, f"resume after the kill works ({err[-300:]})")

# ---- damaged and mismatched checkpoints
good = os.path.join(base, "ref2", "checkpoints")  # the 2-rank reference run
final = sorted(glob.glob(os.path.join(good, "ckpt_*.bin")))[-1]
data = open(final, "rb").read()
bad_dir = os.path.join(base, "bad", "checkpoints")
os.makedirs(bad_dir)
older = os.path.join(bad_dir, "ckpt_step0000000060.bin")
newer = os.path.join(bad_dir, "ckpt_step0000000065.bin")  # its name is not its step either: refused first for the flip
with open(older, "wb") as f:  # the intact step-60 checkpoint
    f.write(data)
flipped = bytearray(data)
flipped[len(flipped) // 2] ^= 0x40
with open(newer, "wb") as f:
    f.write(flipped)
bad_args = [f"run.out_dir={os.path.join(base, 'bad')}", "run.steps=70"]
rc, out, err = run(cfg, bad_args + [f"checkpoint.resume={newer}"], np=2)
check(rc == 4 and "checksum mismatch" in err and newer in err, f"corrupted checkpoint: exit {rc}, named ({err[-300:]})")
rc, out, err = run(cfg, bad_args + ["checkpoint.resume=auto"], np=2)
check(rc == 0 and "skipping checkpoint error: " + newer in out and "resumed from " + older in out,
      f"auto skips the corrupted one and resumes from the intact one ({out[-400:]} {err[-200:]})")
trunc = os.path.join(base, "trunc.bin")
with open(trunc, "wb") as f:
    f.write(data[: len(data) - 100])
rc, out, err = run(cfg, bad_args + [f"checkpoint.resume={trunc}"], np=2)
check(rc == 4 and "truncated" in err, f"truncated checkpoint: exit {rc} ({err[-200:]})")
rc, out, err = run(cfg, bad_args + [f"checkpoint.resume={final}"])
check(rc == 0 and "elastic resume: the checkpoint was written by 2 rank(s)" in out,
      f"another world size resumes (elastic), saying so: exit {rc} ({out[-300:]} {err[-200:]})")
rc, out, err = run(cfg, bad_args + [f"checkpoint.resume={final}", "model.hidden=[32,8]"], np=2)
check(rc == 4 and "another model" in err, f"another model: exit {rc} ({err[-200:]})")
rc, out, err = run(cfg, bad_args + ["checkpoint.resume=/nonexistent/ckpt.bin"], np=2)
check(rc == 4 and "/nonexistent/ckpt.bin: cannot open" in err, f"missing checkpoint: exit {rc}")
check(len(glob.glob(os.path.join(ckdir, "ckpt_*.bin"))) <= 3, "only checkpoint.keep (3) checkpoints are kept")
done()
