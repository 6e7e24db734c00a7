"""Hostile round three, the classes outside the training loop (each failed before its fix):
- a FIFO given as a text file, a token shard, a CSV or an IDX file is refused naming it (exit 3)
  instead of blocking forever;
- a data file whose name holds glob characters is read as that file;
- a fault drill aimed at a rank the run does not have is a config error naming the drill (it
  never fired and the run exited 0);
- sample.prompt is used with byte text whatever model.vocab_size (it was ignored unless 256);
- a rank stopped before MPI_Init ends the job promptly (AMP_STARTUP_TIMEOUT_S) instead of never;
- rank 0 busy outside any collective (a long sample) longer than distributed.timeout_s does not
  end a healthy 2-rank job (it ended with exit 6)."""
import os
import subprocess
import time
from e2e_util import args, check, done, metrics, run, source, tmpdir

base = tmpdir()
fifo = os.path.join(base, "data.fifo")
os.mkfifo(fifo)


def quick(sets, np=None, timeout=60):
    t0 = time.time()
    rc, out, err = run(source("configs", "seed_dynamic.yaml"), ["run.steps=5", "run.progress=off"] + sets, np=np,
                       timeout=timeout)
    return rc, out, err, time.time() - t0


gpt = os.path.join(base, "gpt.yaml")
with open(os.path.join(base, "words.txt"), "w") as f:
    f.write(" ".join(["the cat sat on the mat and the dog ran"] * 400) + "\n")
with open(gpt, "w") as f:
    f.write("run: {steps: 4, log_interval: 2, progress: off, threads: 1}\n"
            "model: {type: gpt, n_layer: 1, n_head: 2, n_embd: 16, seq_len: 16}\n"
            f'data: {{format: text, text_files: ["{base}/words.txt"], batch_size: 4}}\n'
            "precision: {compute: fp32}\n"
            "checkpoint: {final: false}\n"
            'sample: {tokens: 20, prompt: "the cat "}\n')

# FIFOs as data files.
for fmt, sets in (("text", [f"data.text_files=[\"{fifo}\"]"]), ("tokens", [f"data.train_tokens=[\"{fifo}\"]"])):
    t0 = time.time()
    rc, out, err = run(gpt, [f"data.format={fmt}"] + sets + [f"run.out_dir={base}/fifo_{fmt}"], timeout=60)
    check(rc == 3 and "not a regular file (a FIFO)" in err and fifo in err and time.time() - t0 < 30,
          f"a FIFO as {fmt} data: exit 3 naming it ({rc}: {err.strip()[-160:]})")
for fmt, sets in (("csv", [f"data.train_csv={fifo}"]), ("idx", [f"data.train_images={fifo}"])):
    rc, out, err, secs = quick([f"data.format={fmt}", "data.task=classification"] + sets + [f"run.out_dir={base}/fifo_{fmt}"])
    check(rc == 3 and "not a regular file (a FIFO)" in err and secs < 30,
          f"a FIFO as {fmt} data: exit 3 naming it ({rc}: {err.strip()[-160:]})")

# A data file named like a glob pattern.
odd = os.path.join(base, "notes[1].txt")
with open(odd, "w") as f:
    f.write(" ".join(["a quick brown fox"] * 300) + "\n")
rc, out, err = run(gpt, [f"data.text_files=[\"{odd}\"]", f"run.out_dir={base}/odd"])
check(rc == 0, f"a file named {os.path.basename(odd)} is read as that file ({rc}: {err.strip()[-200:]})")

# Drills aimed at a rank that does not exist.
for key, spec in (("faults.raise_signal", "[{step: 2, rank: 5}]"), ("faults.corrupt_params", "[{step: 2, rank: 2}]"),
                  ("faults.fail_setup", "[{rank: 3, phase: data}]"), ("faults.await_signal", "[{step: 2, rank: 2}]")):
    rc, out, err, _ = quick([f"{key}={spec}", f"run.out_dir={base}/drill"], np=2)
    check(rc == 2 and key in err and "does not exist in a run of 2 rank(s)" in err,
          f"{key} at a missing rank: exit 2 naming it ({rc}: {err.strip()[-200:]})")

# The prompt with byte text and a vocabulary of 300.
rc, out, err = run(gpt, ["model.vocab_size=300", f"run.out_dir={base}/vocab300"])
samples = [m["sample"] for m in metrics(f"{base}/vocab300") if "sample" in m] if rc == 0 else []
check(rc == 0 and samples and samples[-1].startswith("the cat "),
      f"vocab_size 300 on byte text: the sample continues the prompt ({samples[-1][:40] if samples else err[-200:]!r})")

# A rank stopped before MPI_Init.
stopper = os.path.join(base, "stopper.sh")
with open(stopper, "w") as f:
    f.write('#!/bin/sh\nif [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -STOP $$; fi\nexec "$@"\n')
os.chmod(stopper, 0o755)
t0 = time.time()
p = subprocess.run([source("scripts", "mpirun.sh"), "-np", "2", stopper, args().binary, source("configs", "seed_dynamic.yaml"),
                    "--set", f"run.out_dir={base}/stopped"], capture_output=True, text=True, timeout=120,
                   env=dict(os.environ, AMP_STARTUP_TIMEOUT_S="5"))
secs = time.time() - t0
check(p.returncode != 0 and "start-up error: MPI initialization" in p.stderr and secs < 60,
      f"a rank stopped before MPI_Init ends the job in {secs:.0f} s (exit {p.returncode}: "
      f"{[l for l in p.stderr.splitlines() if 'start-up' in l][:1]})")

# Rank 0 busy with a long sample while rank 1 waits, past distributed.timeout_s.
rc, out, err = run(gpt, ["run.sample_interval=2", "sample.tokens=3000", "distributed.timeout_s=1", "run.steps=4", "model.n_layer=2",
                         "model.seq_len=128", "model.n_embd=128", f"run.out_dir={base}/busy"], np=2, timeout=300)
check(rc == 0 and "watchdog note" in err, f"a long sample on rank 0 past the 1 s timeout: the job finishes ({rc}: "
      f"{[l for l in err.splitlines() if 'watchdog' in l][:1]})")
done()
