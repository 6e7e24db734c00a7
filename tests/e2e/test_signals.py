"""Ctrl-C and the launcher (hostile round three):
- one process, SIGINT (Ctrl-C): the step finishes, a checkpoint is written, exit 0, stopped_early,
  and the console says what is happening; a second SIGINT stops at once (exit 130), leaving the
  checkpoints that were written intact;
- two ranks under scripts/mpirun.sh, SIGTERM (or SIGINT) to the script: every rank checkpoints
  and exits 0, and so does the script (Open MPI's mpirun alone killed the ranks a second later
  and exited 1); a second signal stops the ranks at once; the script returns only after every
  rank has exited."""
import glob
import os
import signal
import subprocess
import time
from e2e_util import args, check, done, metrics, source, summary, tmpdir

base = tmpdir()
cfg = source("configs", "gpt_fortunes_fp32.yaml")
common = ["--set", "run.steps=100000", "--set", "run.log_interval=20", "--set", "run.progress=lines",
          "--set", "run.eval_interval=0", "--set", "sample.tokens=0", "--set", "checkpoint.interval=50",
          "--set", "run.threads=1"]
env = dict(os.environ, OMP_NUM_THREADS="1")


def started(out, seconds=60, checkpoint=False):
    """Waits until the run has logged a step (it is past set-up; the start record comes before any
    step) and, with checkpoint, written a checkpoint."""
    t0 = time.time()
    metrics = os.path.join(out, "metrics.jsonl")
    while time.time() - t0 < seconds:
        logged = os.path.exists(metrics) and '"loss"' in open(metrics).read()
        if logged and (not checkpoint or glob.glob(os.path.join(out, "checkpoints", "ckpt_step*.bin"))):
            return True
        time.sleep(0.2)
    return False


# One process, one Ctrl-C.
out = os.path.join(base, "int1")
p = subprocess.Popen([args().binary, cfg, "--set", f"run.out_dir={out}"] + common, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True, env=env)
check(started(out), "single process started")
p.send_signal(signal.SIGINT)
o, e = p.communicate(timeout=120)
s = summary(out) if os.path.exists(os.path.join(out, "summary.json")) else {}
check(p.returncode == 0 and s.get("stopped_early") and s.get("stop_signal") == "SIGINT" and "SIGINT: finishing this step" in e,
      f"one SIGINT: checkpoint and exit 0 (rc {p.returncode}, {s.get('stop_signal')}, {e.strip()[-200:]})")

# One process, Ctrl-C twice: at once, exit 130, the checkpoints already written intact.
out = os.path.join(base, "int2")
p = subprocess.Popen([args().binary, cfg, "--set", f"run.out_dir={out}", "--set", "checkpoint.interval=1"] + common[:-6] +
                     ["--set", "checkpoint.keep=2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
check(started(out, checkpoint=True), "single process started and checkpointed (checkpoint every step)")
p.send_signal(signal.SIGINT)
time.sleep(0.05)
p.send_signal(signal.SIGINT)
o, e = p.communicate(timeout=120)
check(p.returncode == 130 and "SIGINT again: stopping at once" in e, f"two SIGINTs: exit 130 at once (rc {p.returncode})")
ckpts = sorted(glob.glob(os.path.join(out, "checkpoints", "ckpt_step*.bin")))
last = int(os.path.basename(ckpts[-1])[9:-4]) if ckpts else 0
r = subprocess.run([args().binary, cfg, "--set", f"run.out_dir={out}", "--set", "checkpoint.resume=auto",
                    "--set", f"run.steps={last + 2}", "--set", "run.eval_interval=0", "--set", "sample.tokens=0"],
                   capture_output=True, text=True, env=env) if ckpts else None
check(r is not None and r.returncode == 0 and f"at step {last}" in r.stdout,
      f"the checkpoints written before the second SIGINT are whole: the run resumes from step {last} "
      f"({r.stderr.strip()[-200:] if r else 'no checkpoint'})")

# faults.await_signal holds a run after a step (its checkpoint written) until a stop signal comes
# from outside, however long that takes: the drills of test_slurm.py interrupt at a known step so.
out = os.path.join(base, "await")
mlp = os.path.join(base, "await.yaml")
with open(mlp, "w") as f:
    f.write("run: {steps: 60, log_interval: 1, eval_interval: 0, progress: off}\nmodel: {hidden: [16]}\n"
            "data: {format: synthetic, batch_size: 8, synthetic: {train_samples: 256, eval_samples: 32}}\n"
            "checkpoint: {interval: 5}\n")
p = subprocess.Popen([args().binary, mlp, "--set", f"run.out_dir={out}", "--set", "faults.await_signal=[{step: 5}]"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
started(out, checkpoint=True)  # step 5's, the only one the run writes before it waits
time.sleep(1.0)  # 55 more steps of this model take milliseconds: a run that did not wait is done
steps = [m["step"] for m in metrics(out) if "loss" in m] if os.path.exists(os.path.join(out, "metrics.jsonl")) else []
waiting = p.poll() is None and steps and max(steps) == 5
p.send_signal(signal.SIGTERM)
o, e = p.communicate(timeout=120)
s = summary(out) if os.path.exists(os.path.join(out, "summary.json")) else {}
check(waiting and p.returncode == 0 and s.get("stopped_early") and s.get("steps") == 5,
      f"faults.await_signal: the run waits after step 5 (logged up to step {max(steps) if steps else '-'}), then the "
      f"signal stops it there (rc {p.returncode}, {s.get('steps')} steps: {e.strip()[-200:]})")

# No signal within the drill's timeout_s: an error naming the rank and the step, never a hang. On
# two ranks the other rank is inside the next step's collectives when rank 1 gives up.
out = os.path.join(base, "await_timeout")
t0 = time.time()
r = subprocess.run([source("scripts", "mpirun.sh"), "-np", "2", args().binary, mlp, "--set", f"run.out_dir={out}",
                    "--set", "faults.await_signal=[{step: 5, rank: 1, timeout_s: 2}]"],
                   capture_output=True, text=True, env=env, timeout=120)
took = time.time() - t0
check(r.returncode == 1 and "[rank 1]" in r.stderr and "no stop signal within 2 s after step 5 on rank 1" in r.stderr
      and 2 <= took < 60, f"faults.await_signal's timeout: exit 1 naming rank 1 after {took:.1f} s "
                          f"(rc {r.returncode}: {r.stderr.strip()[-300:]})")

# Two ranks under scripts/mpirun.sh.
for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
    out = os.path.join(base, f"mp_{name}")
    p = subprocess.Popen([source("scripts", "mpirun.sh"), "-np", "2", args().binary, cfg, "--set", f"run.out_dir={out}"] +
                         common, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    check(started(out), f"2 ranks started ({name})")
    p.send_signal(sig)
    o, e = p.communicate(timeout=120)
    s = summary(out) if os.path.exists(os.path.join(out, "summary.json")) else {}
    check(p.returncode == 0 and s.get("stopped_early") and "stopped after step" in o,
          f"{name} to scripts/mpirun.sh: every rank checkpoints, exit 0 (rc {p.returncode}: {e.strip()[-300:]})")

# A model large enough that finishing a step and writing its checkpoint takes a while, so that the
# second signal comes during the graceful stop.
out = os.path.join(base, "mp_twice")
big = ["--set", "model.n_layer=6", "--set", "model.n_embd=384", "--set", "model.n_head=6"]
p = subprocess.Popen([source("scripts", "mpirun.sh"), "-np", "2", args().binary, cfg, "--set", f"run.out_dir={out}"] +
                     common + big, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
check(started(out, seconds=240), "2 ranks started (twice)")  # a larger model: slow to its first step under a loaded ctest -j
p.send_signal(signal.SIGTERM)
time.sleep(0.3)
p.send_signal(signal.SIGTERM)
o, e = p.communicate(timeout=120)
left = subprocess.run(["pgrep", "-f", f"run.out_dir={out}"], capture_output=True, text=True).stdout.split()
s = summary(out) if os.path.exists(os.path.join(out, "summary.json")) else {}
at_once = p.returncode != 0 and "stopping the ranks at once" in e
# (Were the graceful stop done before the second signal was handled, the run ended cleanly.)
clean = p.returncode == 0 and s.get("stopped_early")
check((at_once or clean) and not left,
      f"SIGTERM twice: the ranks stop at once ({'yes' if at_once else 'no: the clean stop was done first'}, rc "
      f"{p.returncode}) and none is left when the script returns ({left})")
done()
