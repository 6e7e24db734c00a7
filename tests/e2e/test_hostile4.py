"""Hostile round four, an independent red team's findings on run folders, resume, signals and
input (each failed before its fix):
- run.json's run_id is a folder name only if it is one (16 hex digits): "../../victim" moved a
  fresh run's predecessor onto another run's files;
- a run.json that is a FIFO is refused naming it (start-up blocked forever);
- resume=auto continues the folder's own run, not another run's checkpoint copied in with a
  higher step; a checkpoint this folder set aside (abandoned/) is not continued in it (the
  current line's checkpoints were rotated away);
- a checkpoint cut short by the run itself is not taken for another run's;
- a larger precision.loss_scale.hysteresis on resume tolerates what a fresh run would;
- a GPT resumed with another n_head (same shapes, another function) is refused;
- a stop signal during the end-of-run sample ends it, after the checkpoint was written (the run
  never stopped before); one during set-up stops before the first step with exit 0 (it was exit 130);
- a run stopped mid log interval counts that interval's time (train_seconds was 0 before the
  first log line);
- checkpoint.dir equal to run.out_dir works (it was refused as locked by itself); a checkpoint.dir
  that is another run's folder is refused; temporaries of an interrupted write are removed;
- a wide initialization far above the uniform loss is not called divergence while it falls;
- sample.prompt bytes outside the vocabulary are refused (they became '~'); a NUL in a CSV cell
  shows in the message."""
import glob
import json
import os
import shutil
import signal
import subprocess
import time
from e2e_util import args, check, done, metrics, run, source, summary, tiny_gpt_config, tmpdir

base = tmpdir()
seed = source("configs", "seed_dynamic.yaml")
quick = ["run.progress=off", "run.threads=1"]


def seed_run(out, *sets, timeout=120):
    return run(seed, [f"run.out_dir={out}"] + quick + list(sets), timeout=timeout)


def sigint_blocked(pid):
    """Whether the process's main thread blocks SIGINT (amp_ddp's main() does so first thing)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))
    except (OSError, StopIteration):
        return False
    return bool(mask & (1 << (signal.SIGINT - 1)))


def run_id(out):
    with open(os.path.join(out, "run.json")) as f:
        return json.load(f)["run_id"]


# ---- run ids that are paths
victim = os.path.join(base, "victim")
seed_run(victim, "run.steps=20")
before = open(os.path.join(victim, "summary.json")).read()
two = os.path.join(base, "two")
seed_run(two, "run.steps=20")
with open(os.path.join(two, "run.json"), "w") as f:
    json.dump({"run_id": "../../victim"}, f)
rc, o, e = seed_run(two, "run.steps=20")
check(rc == 0 and open(os.path.join(victim, "summary.json")).read() == before and
      glob.glob(os.path.join(two, "previous", "*", "summary.json")),
      f"a run_id that is a path names no folder: the other run's files are untouched ({rc}: {o[-300:]})")

# ---- a FIFO as run.json
fifo_dir = os.path.join(base, "fifo")
os.makedirs(fifo_dir)
os.mkfifo(os.path.join(fifo_dir, "run.json"))
t0 = time.time()
rc, o, e = seed_run(fifo_dir, "run.steps=5", timeout=60)
check(rc == 2 and "run.json: not a regular file (a FIFO)" in e and time.time() - t0 < 30,
      f"run.json as a FIFO: exit 2 naming it at once ({rc}: {e.strip()[-200:]})")

# ---- resume=auto continues the folder's run; another run's copied-in checkpoint is skipped
a, b = os.path.join(base, "a"), os.path.join(base, "b")
seed_run(a, "run.steps=30", "checkpoint.interval=10")
seed_run(b, "run.steps=80", "checkpoint.interval=10", "run.seed=7")
shutil.copy(os.path.join(b, "checkpoints", "ckpt_step0000000080.bin"), os.path.join(a, "checkpoints"))
rc, o, e = seed_run(a, "run.steps=40", "checkpoint.interval=10", "checkpoint.resume=auto")
check(rc == 0 and "at step 30" in o and run_id(a) != run_id(b) and
      glob.glob(os.path.join(a, "previous", run_id(b), "checkpoints", "ckpt_step0000000080.bin")),
      f"resume=auto continues the folder's run at 30, the copied step-80 checkpoint moved aside ({rc}: {o[-400:]})")

# ---- a roll-back's set-aside checkpoint is not continued in the same folder
rc, o, e = seed_run(a, "run.steps=40", "checkpoint.interval=10",
                    f"checkpoint.resume={a}/checkpoints/ckpt_step0000000020.bin")
aband = glob.glob(os.path.join(a, "checkpoints", "abandoned", "*", "ckpt_step0000000040.bin"))
check(rc == 0 and aband, f"roll-back to 20: the newer checkpoints set aside ({rc})")
rc, o, e = seed_run(a, "run.steps=50", "checkpoint.keep=1", f"checkpoint.resume={aband[0] if aband else 'x'}")
check(rc == 2 and "was set aside by this run folder" in e and
      os.path.exists(os.path.join(a, "checkpoints", "ckpt_step0000000040.bin")),
      f"resuming a set-aside checkpoint in the same folder is refused, the current line kept ({rc}: {e.strip()[-300:]})")

# ---- the run's own newest checkpoint cut short: skipped, set aside with its line, not "another run's"
cut = os.path.join(base, "cut")
seed_run(cut, "run.steps=30", "checkpoint.interval=10")
newest = os.path.join(cut, "checkpoints", "ckpt_step0000000030.bin")
data = open(newest, "rb").read()
open(newest, "wb").write(data[:40])
rc, o, e = seed_run(cut, "run.steps=40", "checkpoint.interval=10", "checkpoint.resume=auto")
check(rc == 0 and "at step 20" in o and not glob.glob(os.path.join(cut, "previous", "*")) and
      glob.glob(os.path.join(cut, "checkpoints", "abandoned", "*", "ckpt_step0000000030.bin")),
      f"a cut checkpoint of this run: resume at 20, the cut file set aside with its line, not as another run's ({rc}: {o[-300:]})")

# ---- hysteresis raised on resume
hy = os.path.join(base, "hy")
seed_run(hy, "run.steps=30", "checkpoint.interval=30")
plant = "faults.inject_nonfinite=[{step: 32, rank: 0, tensor: fc1.weight, value: inf}, {step: 33, rank: 0, tensor: fc1.weight, value: inf}]"
rc, o, e = seed_run(hy, "run.steps=35", "run.log_interval=1", "checkpoint.resume=auto",
                    "precision.loss_scale.hysteresis=5", plant)
scales = [m["scale"] for m in metrics(hy) if m.get("step", 0) >= 30 and "scale" in m and "loss" in m]
check(rc == 0 and len(set(scales)) == 1 and "hysteresis left 1 -> 5" in o,
      f"hysteresis 1 -> 5 on resume: two overflows keep the scale, as in a fresh run ({rc}: {scales})")

# ---- GPT: another n_head is another model
gpt = tiny_gpt_config(base)
g = os.path.join(base, "g")
run(gpt, [f"run.out_dir={g}", "run.steps=4", "checkpoint.final=true"] + quick)
rc, o, e = run(gpt, [f"run.out_dir={g}", "run.steps=6", "model.n_head=4", "checkpoint.resume=auto"] + quick)
check(rc == 4 and "another model: model.n_head" in e, f"resume with n_head 2 -> 4: refused ({rc}: {e.strip()[-200:]})")

# ---- a stop signal during the final sample: the checkpoint is already written, the sample ends
g2 = os.path.join(base, "g2")
p = subprocess.Popen([args().binary, gpt, "--set", f"run.out_dir={g2}", "--set", "run.steps=2", "--set",
                      "checkpoint.final=true", "--set", "sample.tokens=1000000"] + [a for s in quick for a in ("--set", s)],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     env=dict(os.environ, OMP_NUM_THREADS="1"))
t0 = time.time()
while time.time() - t0 < 60 and not glob.glob(os.path.join(g2, "checkpoints", "ckpt_step*.bin")):
    time.sleep(0.1)
time.sleep(0.5)
p.send_signal(signal.SIGINT)
try:
    o, e = p.communicate(timeout=60)
except subprocess.TimeoutExpired:
    p.kill()
    o, e = p.communicate()
check(p.returncode == 0 and "was cut short after" in o and os.path.exists(os.path.join(g2, "summary.json")),
      f"SIGINT during the final sample: it ends, the run finishes with its checkpoint (rc {p.returncode}: {o[-300:]})")

# ---- a stop signal during set-up: stops before the first step, exit 0
g3 = os.path.join(base, "g3")
p = subprocess.Popen([args().binary, gpt, "--set", f"run.out_dir={g3}"] + [a for s in quick for a in ("--set", s)],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     env=dict(os.environ, OMP_NUM_THREADS="1"))
# Inside set-up (the red team's window: 0.3-0.5 s after start), but not before main() has blocked
# the stop signals: before that (the loader still mapping libraries, which under a loaded CI
# machine took longer than 0.3 s) SIGINT's default action kills any program, ours included.
t0 = time.time()
while time.time() - t0 < 30 and p.poll() is None and not sigint_blocked(p.pid):
    time.sleep(0.01)
time.sleep(0.1)
p.send_signal(signal.SIGINT)
o, e = p.communicate(timeout=60)
s = summary(g3) if os.path.exists(os.path.join(g3, "summary.json")) else {}
check(p.returncode == 0 and s.get("stopped_early") and ("during set-up" in o + e or "finishing this step" in e),
      f"SIGINT right after start: exit 0 with a summary (rc {p.returncode}: {(o + e).strip()[-200:]})")

# ---- stopped mid log interval: its time counts
mid = os.path.join(base, "mid")
rc, o, e = seed_run(mid, "run.steps=400", "run.log_interval=1000", "faults.raise_signal=[{step: 60, rank: 0}]")
s = summary(mid)
check(rc == 0 and s.get("stopped_early") and s.get("train_seconds", 0) > 0 and s.get("samples_per_second", 0) > 0,
      f"stopped before the first log line: train_seconds measured ({s.get('train_seconds')})")

# ---- checkpoint folders
same = os.path.join(base, "same")
rc, o, e = seed_run(same, "run.steps=10", f"checkpoint.dir={same}")
check(rc == 0 and os.path.exists(os.path.join(same, "ckpt_step0000000010.bin")),
      f"checkpoint.dir == run.out_dir works ({rc}: {e.strip()[-200:]})")
rc, o, e = seed_run(os.path.join(base, "other"), "run.steps=10", f"checkpoint.dir={victim}")
check(rc == 2 and "is the run folder of run" in e, f"checkpoint.dir = another run's folder: refused ({rc}: {e.strip()[-200:]})")
stale = os.path.join(victim, "checkpoints", "ckpt_step0000000020.bin.tmp.999999")
open(stale, "w").write("half a checkpoint")
rc, o, e = seed_run(victim, "run.steps=25", "checkpoint.resume=auto")
check(rc == 0 and not os.path.exists(stale) and "unfinished file of a write" in o,
      f"a temporary of an interrupted write is removed at start ({rc}: {o[-300:]})")

# ---- a wide initialization far above the uniform loss falls and is not divergence
rows = "".join(f"{(i * 37) % 11 - 5},{(i * 53) % 7 - 3},{(i * 37) % 11 > 5:d}\n" for i in range(400))
csv = os.path.join(base, "two.csv")
open(csv, "w").write("a,b,label\n" + rows)
rc, o, e = seed_run(os.path.join(base, "wide"), "data.format=csv", f"data.train_csv={csv}", "data.task=classification",
                    "model.init=normal", "model.init_std=1", "model.hidden=[16]", "run.steps=100", "run.log_interval=10",
                    "precision.compute=fp32")
check(rc == 0, f"init_std 1 on two classes (loss far above ln 2 at first): trains on ({rc}: {e.strip()[-300:]})")

# ---- inputs
rc, o, e = run(gpt, [f"run.out_dir={base}/prompt", "model.vocab_size=127", "sample.prompt=h\u00e9llo"] + quick)
check(rc == 2 and "sample.prompt: token 1 of the prompt" in e, f"a prompt byte beyond the vocabulary: refused ({rc}: {e.strip()[-200:]})")
nul = os.path.join(base, "nul.csv")
open(nul, "wb").write(b"a,b,label\n1,2\x00x,0\n")
rc, o, e = seed_run(os.path.join(base, "nul"), "data.format=csv", f"data.train_csv={nul}", "data.task=classification")
check(rc == 3 and "\\x00x" in e, f"a NUL in a CSV cell shows in the message ({rc}: {e.strip()[-200:]})")

done()
