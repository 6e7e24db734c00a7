"""The SLURM scripts on a real SLURM: a one-node cluster started here (scripts/slurm/local_cluster.sh:
private munged, slurmctld, slurmd, generated slurm.conf in a temp dir).
(a) scripts/slurm/train.sbatch as a 2-task job (srun --mpi=pmix) trains and writes summary.json;
(b) preemption drills on a longer job with periodic checkpoints, each compared bit for bit with an
    uninterrupted 2-rank reference run (scripts/mpirun.sh -np 2); the job's ranks wait after step 200
    for the drill's signal (faults.await_signal), so it lands there whatever the machine's load:
    1. SIGTERM to the job's tasks (what `--signal=TERM@120` does): clean stop with a checkpoint, the
       script requeues its own job, the requeued job resumes and finishes;
    2. `scontrol requeue` of the running job: SLURM terminates it (SIGTERM, checkpoint), requeues it;
    3. the mpirun variant with a batch-shell signal (`--signal=B:USR1@120`), forwarded to mpirun
       and by mpirun to the ranks;
    4. the mpirun variant with SIGTERM to the batch shell, forwarded as SIGUSR1 (mpirun would kill
       its ranks a second after a SIGTERM);
(c) scripts/slurm/scaling_study.sh with train_multinode.sbatch on 1 node x 1 and x 2 tasks;
then stops every daemon it started (by PID) and removes its temp dir.
Needs root and the packages of scripts/setup.sh (slurmctld slurmd slurm-client munge)."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from e2e_util import args, check, done, skip, source, summary, tmpdir

if os.geteuid() != 0:
    skip("needs root to start munged, slurmctld and slurmd")
missing = [t for t in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
           if not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}")]
if missing:
    check(False, f"SLURM tools missing: {' '.join(missing)} (scripts/setup.sh installs them)")
    done()

T0 = time.time()
base = tmpdir()
os.chmod(base, 0o711)  # munged runs as the munge user and must reach its socket below
cluster = os.path.join(base, "cluster")
work = os.path.join(base, "work")
os.makedirs(os.path.join(work, "logs"))
lc = source("scripts", "slurm", "local_cluster.sh")
env = dict(os.environ, SLURM_CONF=os.path.join(cluster, "slurm.conf"), AMP_BIN=os.path.abspath(args().binary),
           AMP_ROOT=os.path.abspath(args().source), OMP_NUM_THREADS="1",
           # for the mpirun variant (root, and the transports this container allows)
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
           OMPI_MCA_pml="ob1", OMPI_MCA_btl="self,vader,tcp", OMPI_MCA_btl_vader_single_copy_mechanism="none")
for k in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "AMP_"))
          and k not in ("SLURM_CONF", "AMP_BIN", "AMP_ROOT")]:
    del env[k]  # inside another allocation, or AMP_* settings of the caller: ours only
train = source("scripts", "slurm", "train.sbatch")


def sh(cmd, timeout=60, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work, timeout=timeout, **kw)
    return p.returncode, p.stdout, p.stderr


def sbatch(*a):
    rc, out, err = sh(["sbatch", "--parsable"] + list(a))
    if rc != 0:
        raise RuntimeError(f"sbatch failed: {err.strip()}")
    return out.strip().split(";")[0]


def job_state(jid):
    rc, out, _ = sh(["scontrol", "-o", "show", "job", jid])
    m = re.search(r"JobState=(\S+)", out)
    return m.group(1) if m else "GONE"


def wait_job(jid, timeout, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                                   "PREEMPTED", "BOOT_FAIL", "DEADLINE", "GONE")):
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = job_state(jid)
        if s in states:
            return s
        time.sleep(0.5)
    return "WAIT-TIMEOUT"


def wait_for(cond, timeout, step=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(step)
    return False


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def tail(text, n=600):
    return text[-n:].replace("\n", " | ")


small = os.path.join(work, "small.yaml")
with open(small, "w") as f:
    f.write("run: {name: slurm_small, steps: 40, log_interval: 10, progress: off}\n"
            "model: {hidden: [32]}\n"
            "data: {format: synthetic, batch_size: 8, synthetic: {train_samples: 1024, eval_samples: 128}}\n")
# The drills' job: checkpoints every 100 steps; in a drill, both ranks wait after step 200 (its
# checkpoint written) until the interruption's signal arrives (faults.await_signal), so the drill
# interrupts at a known step however fast or loaded the machine is. The reference run does not wait.
LONG_STEPS, HOLD = 400, 200
long_cfg = os.path.join(work, "long.yaml")
with open(long_cfg, "w") as f:
    f.write(f"run: {{name: slurm_long, steps: {LONG_STEPS}, log_interval: 100, eval_interval: 100000, progress: off}}\n"
            "model: {hidden: [512, 512]}\n"
            "data: {format: synthetic, batch_size: 32, synthetic: {train_samples: 4096, eval_samples: 256}}\n"
            "precision: {compute: fp16, loss_scale: {mode: dynamic, init_scale: 4096, growth_interval: 50}}\n"
            "checkpoint: {interval: 100, keep: 2}\n")
hold = f"faults.await_signal=[{{step: {HOLD}, rank: 0}}, {{step: {HOLD}, rank: 1}}]"


def tests():
    rc, out, err = sh(["bash", lc, "up", cluster], timeout=120)
    check(rc == 0, f"local SLURM cluster up ({tail(out + err)})")
    if rc != 0:
        return
    print(f"cluster up after {time.time() - T0:.1f} s", flush=True)

    # ---- (a) a 2-task job of train.sbatch
    out_a = os.path.join(work, "run_a")
    jid = sbatch("-n", "2", "--job-name=amp_a", train, small, "--set", f"run.out_dir={out_a}")
    st = wait_job(jid, 120)
    log_a_path = os.path.join(work, "logs", f"amp_a-{jid}.out")
    log_a = read(log_a_path)
    s = summary(out_a) if os.path.exists(os.path.join(out_a, "summary.json")) else {}
    check(st == "COMPLETED" and s.get("world_size") == 2 and s.get("steps") == 40,
          f"(a) train.sbatch -n 2: job {jid} {st}, summary world_size {s.get('world_size')} ({tail(log_a)})")
    check("srun --mpi=pmix" in log_a and os.path.exists(log_a_path), "(a) launched by srun --mpi=pmix, log in logs/%x-%j.out")

    # ---- the uninterrupted reference of the drill config
    ref = os.path.join(work, "ref")
    p = subprocess.run([source("scripts", "mpirun.sh"), "-np", "2", args().binary, long_cfg, "--set", f"run.out_dir={ref}"],
                       capture_output=True, text=True, env=env, timeout=300)
    check(p.returncode == 0, f"reference run (mpirun -np 2) ({tail(p.stderr)})")
    ref_hash = summary(ref)["params_hash"] if p.returncode == 0 else "?"
    print(f"reference done after {time.time() - T0:.1f} s: params_hash {ref_hash}", flush=True)

    def drill(tag, interrupt, extra_sbatch=(), extra_env=None, want_requeue=True, stop_line=True):
        out_dir = os.path.join(work, f"run_{tag}")
        name = f"amp_{tag}"
        if extra_env:
            env.update(extra_env)
        try:
            jid = sbatch("-n", "2", f"--job-name={name}", *extra_sbatch, train, long_cfg, "--set", f"run.out_dir={out_dir}",
                         "--set", hold)
        finally:
            for k in (extra_env or {}):
                env.pop(k, None)
        logf = os.path.join(work, "logs", f"{name}-{jid}.out")
        held = os.path.join(out_dir, "checkpoints", f"ckpt_step{HOLD:010d}.bin")
        ok = wait_for(lambda: os.path.exists(held) and job_state(jid) == "RUNNING", 120)
        check(ok, f"({tag}) job {jid} running, waiting after step {HOLD}'s checkpoint")
        rc, o, e = sh(interrupt(jid))
        check(rc == 0, f"({tag}) {' '.join(interrupt(jid))} ({e.strip()})")
        if want_requeue:
            # the job leaves RUNNING, is requeued (PENDING, held ~cred_expire s) and runs again
            requeued = wait_for(lambda: "Restarts=1" in sh(["scontrol", "-o", "show", "job", jid])[1], 60)
            check(requeued, f"({tag}) job {jid} was requeued")
            # the requeued run's first line is in the (appended) log once it runs
        st = wait_job(jid, 240)
        log = read(logf)
        s = summary(out_dir) if os.path.exists(os.path.join(out_dir, "summary.json")) else {}
        m = re.search(r"resumed from \S+ckpt_step0*(\d+)\.bin at step (\d+)", log)
        check(m is not None and int(m.group(2)) == HOLD and log.count("checkpoint.resume is auto but") == 1,
              f"({tag}) the requeued job resumed from a checkpoint at step {m.group(2) if m else '?'} "
              f"({tail(log, 900)})")
        if stop_line:  # rank 0's output of the stop (with scontrol requeue, srun may be gone before it)
            m2 = re.search(r"stopped after step (\d+)", log)
            check(m2 is not None and m is not None and m2.group(1) == m.group(2),
                  f"({tag}) stopped on the signal after step {m2.group(1) if m2 else '?'} and resumed there")
        check(st == "COMPLETED" and s.get("steps") == LONG_STEPS and not s.get("stopped_early"),
              f"({tag}) job {jid} {st}: {s.get('steps')} steps, not stopped early")
        check(s.get("params_hash") == ref_hash,
              f"({tag}) params_hash {s.get('params_hash')} == uninterrupted reference {ref_hash}")
        print(f"({tag}) done after {time.time() - T0:.1f} s", flush=True)
        return log

    # ---- (b1) SIGTERM to the tasks, as --signal=TERM@120 does; the script requeues its job
    log = drill("sigterm", lambda j: ["scancel", "--signal=TERM", j])
    check("requeueing job" in log and "stop requested (SIGTERM)" in log, "(sigterm) the batch script requeued its job")
    # ---- (b2) scontrol requeue: SLURM signals the job (SIGTERM, KillWait) and requeues it
    log = drill("requeue", lambda j: ["scontrol", "requeue", j], stop_line=False)
    check("DUE TO JOB REQUEUE" in log, "(requeue) SLURM requeued the running job")
    # ---- (b3) the mpirun variant: SIGUSR1 to the batch shell only (--signal=B:USR1@120), forwarded
    log = drill("mpirun", lambda j: ["scancel", "--batch", "--signal=USR1", j],
                extra_sbatch=("--signal=B:USR1@120",), extra_env={"AMP_LAUNCHER": "mpirun"})
    check("command: mpirun" in log and "got SIGUSR1: forwarding" in log and "stop requested (SIGUSR1)" in log,
          "(mpirun) the batch shell forwarded SIGUSR1 through mpirun to the ranks")
    # ---- (b4) the mpirun variant with SIGTERM to the batch shell: mpirun would kill the ranks a
    # second after a SIGTERM, checkpoint or not; the shell forwards it as SIGUSR1 instead
    log = drill("mpirun_term", lambda j: ["scancel", "--batch", "--signal=TERM", j], extra_env={"AMP_LAUNCHER": "mpirun"})
    check("got SIGTERM: forwarding SIGUSR1" in log and "stop requested (SIGUSR1)" in log,
          "(mpirun_term) the batch shell turned SIGTERM into SIGUSR1 for mpirun and the ranks")

    # ---- (c) the scaling study through train_multinode.sbatch: 1 node x 1 and x 2 tasks
    study = os.path.join(work, "study")
    p = subprocess.run(["bash", source("scripts", "slurm", "scaling_study.sh"), small, "--set", "run.steps=200",
                        "--set", "model.hidden=[64,64]"], capture_output=True, text=True, cwd=work, timeout=300,
                       env=dict(env, AMP_STUDY_NODES="1", AMP_STUDY_TASKS_PER_NODE="1 2", AMP_STUDY_DIR=study,
                                AMP_STUDY_POLL="1"))
    table = p.stdout
    print(table, flush=True)
    rows = [line for line in table.splitlines() if re.match(r"\| 1 \| [12] \| [12] \|", line)]
    check(p.returncode == 0 and len(rows) == 2 and "| 1.00 |" in rows[0],
          f"(c) scaling_study.sh: a table with 1x1 and 1x2 rows ({tail(p.stderr)})")
    check(os.path.exists(os.path.join(study, "table.md")), "(c) table.md written")


try:
    tests()
except Exception as e:  # a timeout or a failed command: a failed check, and clean up all the same
    check(False, f"unexpected error: {e!r}")
finally:
    rc, out, err = sh(["bash", lc, "down", cluster], timeout=120)
    print(out.strip(), err.strip(), flush=True)
    leftovers = []
    for pidfile in ("slurmctld.pid", "slurmd.pid", "munge/munged.pid"):
        pid = read(os.path.join(cluster, pidfile)).strip()
        if pid and os.path.exists(f"/proc/{pid}"):
            leftovers.append(pidfile)
    check(not leftovers, f"daemons stopped ({leftovers})")
    # any rank still alive (it would carry our temp path in its arguments): end it by PID
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                if base.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                    os.kill(int(pid), 9)
                    print(f"killed leftover process {pid}")
            except OSError:
                pass
    if os.environ.get("AMP_E2E_KEEP") == "1":
        print(f"kept {base} (AMP_E2E_KEEP=1)")
    else:
        shutil.rmtree(base, ignore_errors=True)
    print(f"total {time.time() - T0:.1f} s", flush=True)
done()
