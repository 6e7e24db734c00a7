"""`amp_ddp sample CHECKPOINT`: text from a checkpoint without the training data. The sample of a
run's final checkpoint with the run's sample.* settings is the run's final sample, byte for byte (in
FP32 and in FP16 compute: the masters are cast as the optimizer casts them; in FP8 compute: the
linear layers cast with the scales the run ended with); options override them,
the same seed gives the same text, and a checkpoint of an MLP, a missing file, a prompt the
vocabulary cannot hold and bad options are clear errors with their exit codes."""
import glob
import json
import os
import subprocess
from e2e_util import args, check, done, run, source, tiny_gpt_config, tmpdir

base = tmpdir()
cfg = tiny_gpt_config(base)


def sample(*argv):
    p = subprocess.run([args().binary, "sample"] + list(argv), capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    return p.returncode, p.stdout, p.stderr


def final_sample(out):
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    return [r["sample"] for r in records if "sample" in r][-1]


runs = {}
for prec in ("fp32", "fp16", "fp8"):
    out = os.path.join(base, prec)
    rc, o, e = run(cfg, [f"run.out_dir={out}", "checkpoint.final=true", f"precision.compute={prec}",
                         "run.sample_interval=0", "run.threads=1"])
    check(rc == 0, f"{prec}: the training run ({rc}: {e.strip()[-200:]})")
    runs[prec] = (out, glob.glob(os.path.join(out, "checkpoints", "ckpt_step*.bin"))[0], final_sample(out))

os.remove(os.path.join(base, "corpus.txt"))  # the training text is gone: the checkpoint is enough
for prec, (out, ckpt, want) in runs.items():
    rc, o, e = sample(ckpt, "--threads", "1")
    check(rc == 0 and o == want + "\n",
          f"{prec}: the final checkpoint's sample is the run's final sample ({rc}: {o!r} vs {want!r}; {e.strip()[-200:]})")

ckpt = runs["fp32"][1]
rc1, a, e = sample(ckpt, "--prompt", "the lazy ", "--tokens", "25", "--seed", "7", "--temperature", "0.5")
rc2, b, _ = sample(ckpt, "--prompt", "the lazy ", "--tokens", "25", "--seed", "7", "--temperature", "0.5")
rc3, c, _ = sample(ckpt, "--prompt", "the lazy ", "--tokens", "25", "--seed", "8", "--temperature", "0.5")
check(rc1 == 0 and a.startswith("the lazy ") and len(a.encode()) >= len("the lazy ") + 25 and a == b and a != c,
      f"options: the prompt is continued by 25 tokens, one seed one text, another seed another ({a!r}, {c!r}; {e.strip()[-200:]})")

# --samples: samples separated by a line of dashes, sample i drawn with seed + i.
rc, many, e = sample(ckpt, "--prompt", "the lazy ", "--tokens", "25", "--seed", "7", "--temperature", "0.5", "--samples", "3")
parts = many.split("\n---------------\n")
check(rc == 0 and len(parts) == 3 and parts[0] + "\n" == a and parts[1] + "\n" == c,
      f"--samples 3: three samples, the first with seed 7's text, the second seed 8's ({rc}: {many!r}; {e.strip()[-200:]})")
# --top-p: a nucleus of one token (p below any token's probability) is greedy: every seed the same.
rc1, g1, e = sample(ckpt, "--prompt", "the lazy ", "--tokens", "25", "--seed", "7", "--top-p", "1e-9")
rc2, g2, _ = sample(ckpt, "--prompt", "the lazy ", "--tokens", "25", "--seed", "8", "--top-p", "1e-9")
rc3, g3, _ = sample(ckpt, "--prompt", "the lazy ", "--tokens", "25", "--seed", "7", "--top-p", "1e-9", "--temperature", "3")
check(rc1 == rc2 == rc3 == 0 and g1 == g2 == g3 and g1.startswith("the lazy "),
      f"--top-p 1e-9: the likeliest token each time, whatever the seed or temperature ({g1!r}, {g2!r}, {g3!r}; {e.strip()[-200:]})")
rc, o, e = sample(ckpt, "--top-p", "0")
check(rc == 2 and "usage error" in e and "--top-p" in e, f"--top-p 0: a usage error ({rc}: {e.strip()})")
rc, o, e = run(cfg, [f"run.out_dir={os.path.join(base, 'topp')}", "sample.top_p=1.5"])
check(rc == 2 and "sample.top_p" in e, f"sample.top_p 1.5: a config error naming the key ({rc}: {e.strip()[-300:]})")

# An MLP's checkpoint: not a language model.
mlp = os.path.join(base, "mlp")
run(source("configs", "seed_dynamic.yaml"), [f"run.out_dir={mlp}", "run.steps=3", "run.progress=off"])
rc, o, e = sample(glob.glob(os.path.join(mlp, "checkpoints", "ckpt_step*.bin"))[0])
check(rc == 2 and "sampling needs a language model" in e, f"an MLP checkpoint is refused ({rc}: {e.strip()[-200:]})")
rc, o, e = sample(os.path.join(base, "absent.bin"))
check(rc == 4 and "checkpoint error" in e and "absent.bin" in e, f"a missing checkpoint: exit 4 naming it ({rc}: {e.strip()})")
rc, o, e = sample(ckpt, "--temperature", "0")
check(rc == 2 and "usage error" in e and "--temperature" in e, f"--temperature 0: a usage error ({rc}: {e.strip()})")
rc, o, e = sample(ckpt, "--tokens", "abc")
check(rc == 2 and "usage error" in e, f"--tokens abc: a usage error ({rc}: {e.strip()})")
small = os.path.join(base, "small")
run(cfg, [f"run.out_dir={small}", "model.vocab_size=127", "checkpoint.final=true", "run.steps=2",
          f"data.text_files=[\"{source('tests', 'e2e', 'e2e_util.py')}\"]"])
small_ckpt = glob.glob(os.path.join(small, "checkpoints", "ckpt_step*.bin"))
rc, o, e = sample(small_ckpt[0] if small_ckpt else "x", "--prompt", "h\u00e9llo")
check(rc == 2 and "--prompt: sample.prompt: token 1 of the prompt" in e,
      f"a prompt byte beyond a vocabulary of 127: refused naming --prompt ({rc}: {e.strip()[-200:]})")
done()
