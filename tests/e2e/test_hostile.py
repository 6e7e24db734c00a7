"""Hostile inputs and stuck ranks: every class of input that once crashed, hung, lied or lost data
is a clear error with the documented exit code (2 config, 3 data, 4 checkpoint, 5 divergence,
6 ranks disagree or a stuck collective, 8 run output), a documented refusal, or correct
behaviour. Every run here is under a timeout: a hang fails the test instead of hanging it."""
import glob
import json
import os
import signal
import stat
import subprocess
import time
from e2e_util import args, check, done, run, source, summary, tmpdir

d = tmpdir()
MPIRUN = source("scripts", "mpirun.sh")
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def write(name, text, mode="w"):
    p = os.path.join(d, name)
    with open(p, mode) as f:
        f.write(text)
    return p


def expect(res, code, *fragments, what=""):
    rc, out, err = res
    text = out + err
    ok = rc == code and all(f in text for f in fragments)
    check(ok, f"{what}: exit {rc} (want {code}), output has {fragments}" + ("" if ok else f"\n{text[-1200:]}"))


def launch(parts, timeout=120):
    """mpirun MPMD: parts is a list of argument lists, one rank each. Returns (rc, out, err)."""
    cmd = [MPIRUN]
    for i, a in enumerate(parts):
        cmd += ([":"] if i else []) + ["-np", "1", args().binary] + a
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return -999, e.stdout or "", f"TIMEOUT after {timeout} s: {e.stderr or ''}"


# A small regression run: seconds on one core.
small = write("small.yaml", "run: {name: small, steps: 40, log_interval: 10, progress: off}\n"
              "model: {hidden: [16]}\n"
              "data: {format: synthetic, batch_size: 8, synthetic: {train_samples: 512, eval_samples: 64}}\n"
              "precision: {compute: fp16}\noptimizer: {type: adamw, lr: 0.01}\n")
out = lambda name: f"run.out_dir={os.path.join(d, name)}"

# ---- unbounded integers and sizes: clear errors before anything runs
for key, value, frag in [
        ("run.threads", "100000", "run.threads: expected an integer in [0, 1024]"),
        ("model.hidden", "[4611686018427387904]", "model.hidden[0]: expected an integer in [1, 16777216]"),
        ("data.eval_batch_size", str(2**60), "data.eval_batch_size: expected an integer in [0, 16777216]"),
        ("run.epochs", str(2**57), "run.epochs: expected an integer in [0, 1000000000]"),
        ("data.n_classes", "4294967306", "data.n_classes: expected an integer in [0, 16777216]"),
        ("precision.loss_scale.growth_interval", str(2**40), "growth_interval: expected an integer in [1, 2147483647]"),
        ("checkpoint.interval", "1e18", "checkpoint.interval: expected an integer in [0, 1000000000]"),
        ("faults.inject_nonfinite", "[{step: 99999999999, rank: 0}]", "faults.inject_nonfinite[0].step"),
]:
    expect(run(small, [f"{key}={value}", out("bounds")]), 2, frag, what=f"{key}={value}")
expect(run(small, ["model.hidden=[16777216, 16777216]", out("mem")]), 2, "model.hidden: a model of layer widths",
       "per rank; this rank may use", what="a model larger than memory")
expect(run(small, ["run.epochs=1000000000", "run.steps=0", out("ep")]), 2, "run.epochs: 1000000000 epochs of 64 steps",
       what="epochs x steps per epoch beyond the step limit")
for np in (2, 4):  # a global batch larger than the data set, on several ranks: no division by zero
    expect(run(small, ["data.batch_size=16777216", out(f"gb{np}")], np=np, timeout=120), 2,
           "data.batch_size: a global batch of", what=f"huge batch on {np} ranks")

# ---- non-finite and out-of-FP32 numbers
for key, value in [("optimizer.lr", ".inf"), ("optimizer.lr", "1e308"), ("optimizer.lr", ".nan"),
                   ("precision.loss_scale.init_scale", "1e39"), ("model.init_std", "1e-50"),
                   ("data.synthetic.noise", "-.inf")]:
    expect(run(small, [f"{key}={value}", out("nf")]), 2, f"{key}: expected", what=f"{key}={value}")
check(run(small, ["precision.loss_scale.max_scale=.inf", out("maxinf")])[0] == 0, "max_scale .inf (no clamp) is allowed")

# ---- YAML that used to be silently last-wins, or a confusing error
expect(run(write("dupkey.yaml", "run:\n  steps: 5\n  steps: 6\n")), 2, "dupkey.yaml:3:3: run.steps: appears twice",
       "first at", "dupkey.yaml:2:3", what="duplicate key")
expect(run(write("dupsec.yaml", "run: {steps: 5}\nmodel: {hidden: [4]}\nrun: {name: x}\n")), 2,
       "dupsec.yaml:3:1: run: appears twice", what="duplicate section")
expect(run(write("twodocs.yaml", "run: {steps: 5}\n---\nrun: {steps: 6}\n")), 2, "twodocs.yaml:", "a second YAML document",
       what="second YAML document")
expect(run(write("deep.yaml", "run:\n  steps: " + "[" * 100000 + "]" * 100000 + "\n")), 2, "deep.yaml:",
       "nested deeper than", what="100k-deep YAML")
expect(run(write("fault_dup.yaml", "faults:\n  inject_nonfinite: [{step: 2, step: 3, rank: 0}]\n")), 2,
       "faults.inject_nonfinite[0].step: appears twice", what="duplicate key inside a fault")

# ---- command line
rc, o, e = run("--set", extra=[f"run.steps=3", small, "--set", out("setfirst"), "--dry-run"])
check(rc == 0 and "steps: 3" in o, f"--set before the config path keeps the path ({e[-300:]})")
rc, o, e = launch([["--help"], [small, "--set", out("mpmd1")]], timeout=60)
check(rc == 2 and "different command lines" in e and "rank 0: --help" in e, f"MPMD: --help on one rank ends every rank ({rc}: {e[-400:]})")
rc, o, e = launch([[small, "--dry-run"], [small, "--set", out("mpmd2")]], timeout=60)
check(rc == 2 and "rank 0: --dry-run, rank 1: train" in e, f"MPMD: --dry-run on one rank ({rc}: {e[-400:]})")
rc, o, e = launch([["--help"], ["--help"]], timeout=60)
check(rc == 0 and o.count("Config keys") == 1, f"MPMD: --help on every rank prints once ({rc})")
rc, o, e = launch([[small, "--set", out("mpmd3")], ["--bogus"]], timeout=60)
check(rc == 2 and "[rank 1] usage error" in e, f"MPMD: a usage error on rank 1 ends every rank ({rc}: {e[-300:]})")
# The one-process subcommands (sample, export, prepare) meet a job's other ranks to end it with a
# message: before, the ranks waiting in MPI_Init were left to Open MPI's own text.
missing = os.path.join(d, "no_such.ckpt")
rc, o, e = launch([[small, "--set", out("mpmd4")], ["sample", missing]], timeout=60)
check(rc == 2 and "rank 0: train, rank 1: sample" in e and not os.path.exists(os.path.join(d, "mpmd4")),
      f"MPMD: sample beside training ends every rank, nothing written ({rc}: {e[-400:]})")
rc, o, e = launch([["export", missing, "--format", "llmc", "-o", os.path.join(d, "x.bin")]] * 2, timeout=60)
check(rc == 2 and e.count("amp_ddp export runs in one process, and this job started it as 2 ranks") == 1
      and not os.path.exists(os.path.join(d, "x.bin")), f"two ranks of export: one message, exit 2 ({rc}: {e[-400:]})")
rc, o, e = launch([["sample", missing]], timeout=60)
check(rc == 4 and missing in e and "one process" not in e, f"sample as a job of one rank runs alone ({rc}: {e[-400:]})")

# ---- one rank failing inside each set-up phase: every rank ends promptly, the rank is named
for phase in ("backend", "data", "comm", "output", "resume"):
    sets = [out(f"fail_{phase}"), f"faults.fail_setup=[{{rank: 1, phase: {phase}}}]"]
    if phase == "resume":
        run(small, [out(f"fail_{phase}")], np=2, timeout=120)  # a checkpoint to resume from
        sets.append("checkpoint.resume=auto")
    t0 = time.time()
    rc, o, e = run(small, sets, np=2, timeout=120)
    took = time.time() - t0
    check(rc not in (0, -999) and "set-up phase \"%s\" failed on rank 1" % phase in (o + e) and took < 60,
          f"set-up phase {phase} failing on rank 1: exit {rc} after {took:.1f} s ({(o + e)[-300:]})")

# ---- a stuck rank (SIGSTOP): the collective watchdog ends the job and names it
def read_or_empty(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def descendants(pid):
    found, todo = [], [str(pid)]
    while todo:
        kids = subprocess.run(["pgrep", "-P", ",".join(todo)], capture_output=True, text=True).stdout.split()
        found += kids
        todo = kids
    return found


wd_dir = os.path.join(d, "wd")
cmd = [MPIRUN, "-np", "2", args().binary, small, "--set", f"run.out_dir={wd_dir}", "--set", "run.steps=100000000",
       "--set", "distributed.timeout_s=4", "--set", "checkpoint.final=false"]
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
victim = None
deadline = time.time() + 60
while victim is None and time.time() < deadline:
    time.sleep(0.5)
    for pid in descendants(p.pid):  # scripts/mpirun.sh runs mpirun, whose children are the ranks
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if b"OMPI_COMM_WORLD_RANK=1\0" in f.read() and '"loss"' in read_or_empty(os.path.join(wd_dir, "metrics.jsonl")):
                    victim = int(pid)
        except OSError:
            pass
check(victim is not None, "found rank 1's process")
t0 = time.time()
if victim:
    os.kill(victim, signal.SIGSTOP)
try:
    o, e = p.communicate(timeout=60)
except subprocess.TimeoutExpired:
    for pid in descendants(p.pid):
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
    p.kill()
    o, e = p.communicate()
    e += "\nTIMEOUT: the job hung"
took = time.time() - t0
check(p.returncode != 0 and took < 30, f"SIGSTOP of rank 1: the job ended in {took:.1f} s with exit {p.returncode}")
check("[rank 0] watchdog error:" in e and "waiting for rank(s) 1" in e and " of step " in e and "distributed.timeout_s" in e,
      f"the watchdog names the collective, the step and rank 1 ({e[-600:]})")

# ---- checkpoint candidates that are not regular files never block resume=auto
fifo_dir = os.path.join(d, "fifo")
os.makedirs(os.path.join(fifo_dir, "checkpoints"))
os.mkfifo(os.path.join(fifo_dir, "checkpoints", "ckpt_step0000000090.bin"))
os.makedirs(os.path.join(fifo_dir, "checkpoints", "ckpt_step0000000080.bin"))
rc, o, e = run(small, [f"run.out_dir={fifo_dir}", "checkpoint.resume=auto"], timeout=60)
check(rc == 0 and "not a regular file" in (o + e) and "starting from step 1" in (o + e),
      f"a FIFO and a folder named like checkpoints are skipped ({rc}: {(o + e)[-500:]})")

# ---- runs that lied: divergence is an error whatever the precision
expect(run(small, ["precision.compute=fp32", "optimizer.lr=1e6", "run.steps=200", out("lr1e6")]), 5,
       "divergence error:", what="AdamW lr 1e6 in FP32 diverges with exit 5")
expect(run(small, ["precision.compute=bf16", "optimizer.lr=1e6", "run.steps=200", out("lr1e6b")]), 5,
       "divergence error:", what="AdamW lr 1e6 in BF16 diverges with exit 5")
expect(run(small, ["precision.compute=fp32", "optimizer.type=sgd", "optimizer.lr=1e30", "optimizer.grad_clip=1",
                   "run.steps=200", "run.max_loss_ratio=0", out("clipinf")]), 5,
       "divergence error:", what="clipping by a non-finite norm skips, then diverges")

# ---- run folders: one run at a time, writable before training starts
lock_dir = os.path.join(d, "locked")
first = subprocess.Popen([args().binary, small, "--set", f"run.out_dir={lock_dir}", "--set", "run.steps=100000000",
                          "--set", "checkpoint.final=false", "--set", "checkpoint.on_signal=false"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
deadline = time.time() + 60
while time.time() < deadline and not os.path.exists(os.path.join(lock_dir, "metrics.jsonl")):
    time.sleep(0.2)
expect(run(small, [f"run.out_dir={lock_dir}"], timeout=60), 2, "run.out_dir", "another run is using this folder",
       f"pid {first.pid}", what="a second run on the same out_dir")
first.kill()
first.wait()
check(run(small, [f"run.out_dir={lock_dir}"], timeout=60)[0] == 0, "the lock goes with the process that held it")
expect(run(small, ["run.out_dir=/proc/amp_ddp_out"]), 8, "output error: run.out_dir: /proc/amp_ddp_out",
       what="unwritable out_dir")
expect(run(small, [out("ckdir"), "checkpoint.dir=/proc/amp_ddp_ckpt"]), 8, "output error: checkpoint.dir: /proc/amp_ddp_ckpt",
       what="unwritable checkpoint.dir")
# A full disk under the run folder (a tmpfs just above the 1 MiB the start-up check asks for; needs
# root): the run stops at once, writes a checkpoint elsewhere, no torn record.
full_dir = os.path.join(d, "full")
os.makedirs(full_dir)
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", full_dir], capture_output=True).returncode == 0:
    try:
        rc, o, e = run(small, [f"run.out_dir={full_dir}/run", f"checkpoint.dir={d}/full_ckpt", "run.steps=100000",
                               "run.log_interval=1", "checkpoint.final=false"], timeout=120)
        check(rc == 8 and "metrics.jsonl: write failed: No space left on device" in e and "stopped after step" in e
              and "checkpoint" in e, f"a failed metrics write stops the run with exit 8 and a checkpoint ({rc}: {e[-500:]})")
        check(len(glob.glob(os.path.join(d, "full_ckpt", "ckpt_step*.bin"))) == 1, "the stop wrote a checkpoint")
        lines = open(os.path.join(full_dir, "run", "metrics.jsonl")).read().splitlines()
        check(all(json.loads(l) is not None for l in lines), f"metrics.jsonl holds whole records only ({len(lines)})")
    finally:
        subprocess.run(["umount", full_dir])
else:
    print("note: a full disk not tried (mounting a tmpfs needs root)")

# ---- data that lied
csv_big = write("big.csv", "a,b,y\n1,2,0\n1e39,4,1\n")
expect(run(small, ["data.format=csv", f"data.train_csv={csv_big}", out("csvbig")]), 3,
       "big.csv:3:1: expected a finite number within FP32's range", what="CSV cell beyond FP32")
csv_nohdr = write("nohdr.csv", "1,2,0\n3,4,1\n5,6,0\n")
expect(run(small, ["data.format=csv", f"data.train_csv={csv_nohdr}", out("nohdr")]), 3,
       "nohdr.csv:1: data.csv_header is true but the first line holds only numbers", what="headerless CSV with csv_header")
rows = "".join(f"{i % 7},{i % 5},{i % 2}\n" for i in range(64))
csv_bom = write("bom.csv", "\ufeffa,b,label\n" + rows)
check(run(small, ["data.format=csv", f"data.train_csv={csv_bom}", "data.target=label", out("bom")])[0] == 0,
      "a UTF-8 BOM before the header does not break column names")
# Ranks whose data differ under the same config (same relative path, different working folders).
for sub, body in (("a", rows), ("b", rows.replace("3,", "4,", 5))):
    os.makedirs(os.path.join(d, sub))
    with open(os.path.join(d, sub, "data.csv"), "w") as f:
        f.write("a,b,label\n" + body)
rel_cfg = write("rel.yaml", "run: {steps: 5, progress: off, out_dir: out}\nmodel: {hidden: [4]}\n"
                "data: {format: csv, train_csv: data.csv, batch_size: 4}\n")
cmd = [MPIRUN, "-np", "1", "-wdir", os.path.join(d, "a"), args().binary, rel_cfg, ":",
       "-np", "1", "-wdir", os.path.join(d, "b"), args().binary, rel_cfg]
p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV)
check(p.returncode == 3 and "rank(s) 1 loaded different data than rank 0" in p.stderr,
      f"ranks whose data files differ: exit 3 naming rank 1 ({p.returncode}: {p.stderr[-400:]})")
with open(os.path.join(d, "b", "data.csv"), "a") as f:
    f.write("1,1,1\n")  # a different row count too
p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV)
check(p.returncode == 3 and "rank(s) 1 loaded different data" in p.stderr,
      f"ranks whose row counts differ: exit 3, no MPI_ERR_TRUNCATE ({p.returncode}: {p.stderr[-300:]})")
# NaN inputs are named, not blamed on the learning rate.
import struct
nan_img = os.path.join(d, "nan.idx")
with open(nan_img, "wb") as f:
    f.write(struct.pack(">BBBBII", 0, 0, 0x0D, 2, 20, 3) + b"".join(struct.pack(">f", float("nan") if i == 37 else 0.5) for i in range(60)))
lab = os.path.join(d, "lab.idx")
with open(lab, "wb") as f:
    f.write(struct.pack(">BBBBI", 0, 0, 0x08, 1, 20) + bytes(i % 2 for i in range(20)))
expect(run(small, ["data.format=idx", f"data.train_images={nan_img}", f"data.train_labels={lab}", "data.eval_images=\"\"",
                   "data.eval_labels=\"\"", "data.batch_size=4", out("nan")]), 3,
       "nan.idx", "sample 12", "feature 1 is nan", what="NaN in the inputs")

# ---- the desync drill names the rank and the step in the program's own output
fm = source("configs", "fmnist_mlp_fp16.yaml")
rc, o, e = run(fm, ["run.steps=20", "data.batch_size=64", "distributed.hash_interval=1", "model.hidden=[32]",
                    "faults.corrupt_params=[{step: 12, rank: 1}]", out("desync")], np=2, timeout=180)
check(rc == 6 and "after step 12" in e and "rank(s) 1" in e, f"desync drill: exit 6 naming rank 1 and step 12 ({rc}: {e[-300:]})")
done()
