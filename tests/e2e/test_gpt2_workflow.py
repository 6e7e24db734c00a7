"""The GPT-2 workflow of docs/gpt2.md, end to end on Debian's fortunes: `amp_ddp prepare` turns text
into GPT-2 BPE token shards (documents between "%" lines, each after <|endoftext|>; never
overwriting), 2 ranks train a small GPT on them in FP16 with data.tokenizer gpt2 (its samples are
text), `amp_ddp sample` continues a prompt from the checkpoint, `amp_ddp export` writes safetensors,
and `amp_ddp eval` gives the validation loss of the checkpoint (the run's own final evaluation, to
the printed digits) and of the exported file (on 1 and 2 ranks alike, and without the training
shards). Needs GPT-2's vocabulary
files (scripts/setup.sh --gpt2)."""
import glob
import json
import os
import re
import subprocess
from e2e_util import args, check, done, run, skip, source, summary, tmpdir

FORTUNES = ["/usr/share/games/fortunes/computers", "/usr/share/games/fortunes/science"]
if not all(os.path.exists(f) for f in FORTUNES):
    skip("Debian's fortunes package is not installed")

base = tmpdir()
env = dict(os.environ, OMP_NUM_THREADS="1")


def amp(*argv, np=None):
    cmd = [args().binary] + list(argv)
    if np:
        cmd = [source("scripts", "mpirun.sh"), "-np", str(np)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    return p.returncode, p.stdout, p.stderr


# ---- text -> shards
shards = os.path.join(base, "shards")
rc, out, err = amp("prepare", *FORTUNES, "--doc-separator", "%", "--val-fraction", "0.1", "-o", shards, "--name", "fortunes")
info = json.load(open(os.path.join(shards, "fortunes_info.json"))) if rc == 0 else {}
check(rc == 0 and info.get("tokenizer") == "gpt2" and info.get("documents", 0) > 1000 and info["val_tokens"] > 5000 and
      os.path.exists(os.path.join(shards, "fortunes_train_000000.bin")) and "prepare [" in err and
      "train_tokens: [" in out, f"prepare: fortunes -> GPT-2 shards with a progress bar ({rc}: {out.strip()})")
before = open(os.path.join(shards, "fortunes_val_000000.bin"), "rb").read()
rc, out, err = amp("prepare", *FORTUNES, "--doc-separator", "%", "-o", shards, "--name", "fortunes", "-q")
check(rc == 8 and "already exists" in err and open(os.path.join(shards, "fortunes_val_000000.bin"), "rb").read() == before,
      f"prepare into a folder holding shards of that name is refused, nothing overwritten ({rc}: {err.strip()})")

# ---- 2 ranks train on them in FP16, samples in text
cfg = os.path.join(base, "gpt2.yaml")
run_dir = os.path.join(base, "run")
with open(cfg, "w") as f:
    f.write("\n".join([
        f'run: {{steps: 30, log_interval: 10, progress: "off", threads: 1, out_dir: "{run_dir}"}}',
        "model: {type: gpt, n_layer: 2, n_head: 2, n_embd: 64, seq_len: 32}",
        f'data: {{format: tokens, tokenizer: gpt2, train_tokens: ["{shards}/fortunes_train_*.bin"], '
        f'eval_tokens: ["{shards}/fortunes_val_*.bin"], batch_size: 4, eval_batch_size: 16}}',
        "precision: {compute: fp16}",
        "optimizer: {type: adamw, lr: 0.003}",
        "checkpoint: {final: true}",
        'sample: {tokens: 12, prompt: "The computer"}',
    ]) + "\n")
rc, out, err = run(cfg, np=2)
s = summary(run_dir) if rc == 0 else {}
ckpt = (glob.glob(os.path.join(run_dir, "checkpoints", "ckpt_step*.bin")) or [""])[0]
sample = out[out.find("sample at step 30:"):]
check(rc == 0 and s.get("steps") == 30 and "eval_loss" in s and ckpt and
      "The computer" in sample and not re.search(r"\b\d{3,5} \d{3,5}\b", sample),
      f"2 ranks train on the shards in FP16; the sample is text that starts with its prompt ({rc}: {err.strip()[-300:]})")

# ---- sample, export, eval
rc, out, err = amp("sample", ckpt, "--prompt", "Unix is", "--tokens", "8", "--seed", "3")
check(rc == 0 and out.startswith("Unix is") and len(out.strip()) > len("Unix is"),
      f"amp_ddp sample continues a prompt in text ({rc}: {out.strip()!r} {err.strip()})")
st = os.path.join(base, "model.safetensors")
rc, out, err = amp("export", ckpt, "--format", "safetensors", "-o", st)
check(rc == 0 and os.path.getsize(st) > 1000, f"exported as safetensors ({rc}: {err.strip()})")


def eval_loss(weights, np=None, *sets):
    argv = ["eval", cfg, "--set", f"model.init_from={weights}"] + [a for x in sets for a in ("--set", x)]
    rc, out, err = amp(*argv, np=np)
    m = re.search(r"^eval loss (\S+) \| perplexity (\S+) \| (\d+) window", out, re.M)
    return (float(m.group(1)) if rc == 0 and m else None), rc, out + err


ck_loss, rc, text = eval_loss(ckpt, 2)
check(ck_loss is not None and abs(ck_loss - s.get("eval_loss", -1)) < 5e-6,
      f"eval of the checkpoint on 2 ranks (FP16) is the run's final evaluation ({ck_loss} vs {s.get('eval_loss')}: {text.strip()[-300:]})")
st1, rc1, t1 = eval_loss(st, None, "precision.compute=fp32")
st2, rc2, t2 = eval_loss(st, 2, "precision.compute=fp32")
# (The ranks' partial sums add in another order on 2 ranks: the same loss to FP32 rounding.)
check(st1 is not None and st2 is not None and abs(st1 - st2) < 1e-5 and abs(st1 - ck_loss) < 0.01,
      f"eval of the exported safetensors in FP32: 1 and 2 ranks agree, near the FP16 loss ({st1}, {st2}, {ck_loss}: {t1.strip()[-200:]})")
rc, out, err = amp("eval", cfg)
check(rc == 2 and "model.init_from" in err, f"eval without weights names model.init_from ({rc}: {err.strip()})")
# Evaluation reads the evaluation shards alone: training shards that are gone (another machine,
# say) are not needed, and the loss is the same.
gone, rc, text = eval_loss(st, None, "precision.compute=fp32", f'data.train_tokens=["{base}/gone/fortunes_train_*.bin"]')
check(gone == st1, f"eval without the training shards: the same loss ({gone} vs {st1}: {text.strip()[-300:]})")
done()
