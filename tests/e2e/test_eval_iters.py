"""Evaluation bounds and the dry run's plan: run.eval_iters caps each rank's evaluation at that many
batches (the first of its shard), on 1 and 2 ranks; the evaluation batch of a GPT defaults to its
training batch (data.eval_batch_size 0 resolves to data.batch_size; an MLP's to 1000, as before);
--dry-run prints a GPT's parameter count, tokens per step and per-rank memory: its training state
and its activations are the very bytes the run's start-up line reports (one function computes
each for both). An MLP on synthetic data (its widths are all in the config) on 1 and 2 ranks with
ZeRO-1: parameters and training state as the run reports them, its activations the memory check's
bound, at or above what the run allocates, for the same samples per forward pass; an MLP on data
files says its sizes are known once the data is read."""
import json
import os
import re
from e2e_util import args, check, done, run, source, tiny_gpt_config, tmpdir

base = tmpdir()
cfg = tiny_gpt_config(base)


def evals(out):
    return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"eval_loss"' in line]


full = os.path.join(base, "full")
rc, o, e = run(cfg, [f"run.out_dir={full}", "run.steps=4", "sample.tokens=0", "run.eval_interval=4"])
whole = evals(full)[-1] if rc == 0 else {}
for np in (1, 2):
    out = os.path.join(base, f"iters{np}")
    rc, o, e = run(cfg, [f"run.out_dir={out}", "run.steps=4", "sample.tokens=0", "run.eval_interval=4",
                         "run.eval_iters=2", "data.eval_batch_size=16"], np=np if np > 1 else None)
    got = evals(out)[-1] if rc == 0 else {}
    check(rc == 0 and got.get("eval_samples") == 2 * 16 * np and whole.get("eval_samples", 0) > 2 * 16 * np and
          got.get("eval_loss", 0) > 0,
          f"{np} rank(s), eval_iters 2 x 16: {got.get('eval_samples')} of {whole.get('eval_samples')} windows evaluated "
          f"({rc}: {e.strip()[-200:]})")

rc, o, e = run(cfg, ["data.eval_batch_size=0"], extra=["--dry-run"])
check(rc == 0 and "  eval_batch_size: 8\n" in o, f"a GPT's evaluation batch defaults to its training batch of 8 ({rc})")
rc, o, e = run(source("configs", "seed_dynamic.yaml"), [], extra=["--dry-run"])
check(rc == 0 and "  eval_batch_size: 1000\n" in o, f"an MLP's stays 1000 ({rc})")
rc, o, e = run(cfg, [], extra=["--dry-run"])
plan = re.search(r"# memory per rank: training state ([^ ]+ [A-Za-z]+) \(masters", o)
rc2, o2, e2 = run(cfg, [f"run.out_dir={base}/plan", "run.steps=1", "sample.tokens=0"])
started = re.search(r"memory per rank: training state ([^ ]+ [A-Za-z]+) \(masters", o2)
check(rc == 0 and "# parameters: " in o and "# tokens per optimizer step: 128 (8 windows of 16)" in o and plan and started and
      plan.group(1) == started.group(1),
      f"--dry-run: parameters, tokens per step, and the training state the run reports "
      f"({plan.group(1) if plan else None} vs {started.group(1) if started else None})")
plan_act = re.search(r"activations at (\d+) windows ([^ ]+ [A-Za-z]+):", o)
run_act = re.search(r"activations ([^ ]+ [A-Za-z]+) \((\d+) windows per forward pass\)", o2)
check(plan_act and run_act and plan_act.group(1) == run_act.group(2) and plan_act.group(2) == run_act.group(1),
      f"--dry-run's activations are what the run allocates ({plan_act.groups() if plan_act else None} vs "
      f"{run_act.groups() if run_act else None})")

mlp = os.path.join(base, "mlp.yaml")
with open(mlp, "w") as f:
    f.write("run: {name: mlp, steps: 1, progress: off}\nmodel: {hidden: [24, 12]}\n"
            "data: {format: synthetic, batch_size: 16, eval_batch_size: 40, synthetic: {train_samples: 256, "
            "eval_samples: 100, features: 7, outputs: 3}}\noptimizer: {type: adamw, lr: 0.01}\n")
units = {"B": 1, "KiB": 2 ** 10, "MiB": 2 ** 20}


def size(text):
    value, unit = text.split()
    return float(value) * units[unit]


for np in (1, 2):
    sets = ["distributed.zero=1"] if np == 2 else []
    rc, o, e = run(mlp, sets, extra=["--dry-run", "--ranks", str(np)])
    plan = re.search(r"# parameters: \S+ \((\d+); layer widths 7-24-12-3\)\n# memory per rank: training state "
                     r"([^ ]+ [A-Za-z]+) \(.*activations at (\d+) samples at most ([^ ]+ [A-Za-z]+):", o)
    rc2, o2, e2 = run(mlp, sets + [f"run.out_dir={base}/mlp{np}"], np=np if np > 1 else None)
    started = re.search(r"\| (\d+) parameters \|.*\nmemory per rank: training state ([^ ]+ [A-Za-z]+) \(.*activations "
                        r"([^ ]+ [A-Za-z]+) \((\d+) samples per forward pass\)", o2)
    check(rc == 0 and rc2 == 0 and plan and started and plan.group(1) == started.group(1) and
          plan.group(2) == started.group(2) and plan.group(3) == started.group(4) and
          size(plan.group(4)) >= size(started.group(3)),
          f"--dry-run of an MLP on synthetic data, {np} rank(s): parameters, training state, samples per forward pass "
          f"as the run reports them, activations at most the bound ({plan.groups() if plan else o[-300:]} vs "
          f"{started.groups() if started else o2[:400]})")
# Widths whose parameter count passes 2^64 (70000 layers of 2^24 x 2^24): said so, never a wrapped count.
huge = os.path.join(base, "huge.yaml")
with open(huge, "w") as f:
    f.write("model: {hidden: [%s]}\ndata: {format: synthetic, batch_size: 16, synthetic: {train_samples: 64, "
            "eval_samples: 8, features: 16777216, outputs: 16777216}}\n" % ",".join(["16777216"] * 70000))
rc, o, e = run(huge, [], extra=["--dry-run"])
check(rc == 0 and "# parameters: more than 2^64 (70001 layers of widths 16777216-...-16777216)" in o and
      "# memory per rank: more than 16 EiB" in o, f"--dry-run of an MLP past 2^64 parameters says so ({rc}: {o[-300:]})")
rc, o, e = run(source("configs", "fmnist_mlp_fp16.yaml"), [], extra=["--dry-run"])
check(rc == 0 and "# parameters and memory: known once the data is read" in o,
      f"an MLP on data files: its sizes are known once the data is read ({rc})")
done()
