"""Helpers for the end-to-end tests: run amp_ddp (under mpirun when asked) and read its output."""
import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

_args = None


def args():
    global _args
    if _args is None:
        p = argparse.ArgumentParser()
        p.add_argument("--binary", required=True)
        p.add_argument("--source", required=True)
        _args, _ = p.parse_known_args()
    return _args


def source(*parts):
    return os.path.join(args().source, *parts)


def run(config, sets=(), np=None, timeout=600, extra=(), env=None, command=None):
    """Runs amp_ddp (or `amp_ddp COMMAND`, e.g. eval); returns (exit code, stdout, stderr)."""
    cmd = [args().binary] + ([command] if command else []) + [config] + [a for s in sets for a in ("--set", s)] + list(extra)
    if np is not None:
        cmd = [source("scripts", "mpirun.sh"), "-np", str(np)] + cmd
    e = dict(os.environ)
    e.setdefault("OMP_NUM_THREADS", "1")
    if env:
        e.update(env)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout, p.stderr


def metrics(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


TIMING = ("step_ms", "samples_per_second", "tokens_per_second", "time")


def records(out_dir):
    """The metrics records without their timings and without the start records of each process
    (run id, fresh or resumed): what a bit-exact rerun must reproduce."""
    return [{k: v for k, v in m.items() if k not in TIMING} for m in metrics(out_dir) if "event" not in m]


def losses(out_dir):
    return [(m["step"], m["loss"]) for m in metrics(out_dir) if "loss" in m]


def summary(out_dir):
    with open(os.path.join(out_dir, "summary.json")) as f:
        return json.load(f)


def tmpdir():
    """A fresh folder, removed when the test ends (kept with AMP_E2E_KEEP=1, for debugging)."""
    d = tempfile.mkdtemp(prefix="amp_e2e_")
    if not os.environ.get("AMP_E2E_KEEP"):
        atexit.register(shutil.rmtree, d, True)
    return d


# The shipped GPT configs end a run by evaluating their whole validation split (2008 windows, 256
# at a time: 0.7 GiB of activations), seconds for every run of a test whose subject is something
# else. With these settings, a run evaluates one batch of 16 windows, the same batch every time.
QUICK_EVAL = ["run.eval_iters=1", "data.eval_batch_size=16"]


def tiny_gpt_config(base):
    """A tiny GPT (2 layers x 32, 2 heads, 16 tokens) on a small English-like text file written into
    base (byte-level tokens): FP32, batch 8, 30 steps logged every step. Returns the config's path."""
    text = os.path.join(base, "corpus.txt")
    with open(text, "w") as f:  # varied English-like text, deterministic
        words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing "
                 "matches near old towers and rivers of gold sing").split()
        lines = []
        for i in range(1500):
            lines.append(" ".join(words[(i * 7 + k * 3) % len(words)] for k in range(3 + i % 9)) + ".")
        f.write("\n".join(lines) + "\n")

    cfg = os.path.join(base, "gpt.yaml")
    with open(cfg, "w") as f:
        f.write("\n".join([
            'run: {steps: 30, log_interval: 1, eval_interval: 30, progress: "off", threads: 1}',
            "model: {type: gpt, n_layer: 2, n_head: 2, n_embd: 32, seq_len: 16}",
            f'data: {{format: text, text_files: ["{text}"], eval_fraction: 0.05, batch_size: 8, eval_batch_size: 16}}',
            "precision: {compute: fp32}",
            "optimizer: {type: adamw, lr: 0.003, weight_decay: 0.0}",
            "checkpoint: {final: false}",
            'sample: {tokens: 40, prompt: "the "}',
        ]) + "\n")
    return cfg


failures = []

# Exit code of a test that cannot run here (a missing optional tool, another machine's golden
# record): ctest reports it as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt), never passed.
SKIP_CODE = 77


def skip(reason):
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP_CODE)


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def done():
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("all checks passed")
