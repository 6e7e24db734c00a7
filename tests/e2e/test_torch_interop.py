"""PyTorch reads amp_ddp's exported weights and computes the same validation loss: a small GPT is
trained on GPT-2 BPE shards of Debian's fortunes (amp_ddp prepare), exported as safetensors, and
scripts/torch_gpt2_eval.py (the nanoGPT-style model of bench/peers, Hugging Face's GPT-2 tensor
names, Conv1D weights transposed) evaluates the same windows as `amp_ddp eval`: the two losses
agree within 1e-4. Needs Debian's python3-torch (scripts/peer_env.sh installs it; CI does not) and
GPT-2's vocabulary files; without torch the test is reported skipped (exit 77), never passed."""
import os
import re
import subprocess
from e2e_util import args, check, done, run, skip, source, tmpdir

PY = "/usr/bin/python3"
FORTUNES = "/usr/share/games/fortunes/computers"
if subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode != 0:
    skip("Debian's python3-torch is not installed: PyTorch cannot load the export here")
if not os.path.exists(FORTUNES):
    skip("Debian's fortunes package is not installed")

base = tmpdir()
env = dict(os.environ, OMP_NUM_THREADS="2")


def sh(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    return p.returncode, p.stdout, p.stderr


shards = os.path.join(base, "shards")
rc, out, err = sh([args().binary, "prepare", FORTUNES, "--doc-separator", "%", "-o", shards, "-q"])
check(rc == 0, f"prepare ({rc}: {err.strip()})")
cfg = os.path.join(base, "gpt.yaml")
run_dir = os.path.join(base, "run")
with open(cfg, "w") as f:
    f.write("\n".join([
        f'run: {{steps: 20, log_interval: 10, progress: "off", threads: 2, out_dir: "{run_dir}"}}',
        "model: {type: gpt, n_layer: 2, n_head: 4, n_embd: 64, seq_len: 48}",
        f'data: {{format: tokens, tokenizer: gpt2, train_tokens: ["{shards}/data_train_*.bin"], '
        f'eval_tokens: ["{shards}/data_val_*.bin"], batch_size: 4}}',
        "precision: {compute: bf16}",
        "optimizer: {type: adamw, lr: 0.003}",
        "checkpoint: {final: true}",
        "sample: {tokens: 0}",
    ]) + "\n")
rc, out, err = run(cfg, env={"OMP_NUM_THREADS": "2"})
ckpt = os.path.join(run_dir, "checkpoints", "ckpt_step0000000020.bin")
st = os.path.join(base, "model.safetensors")
rc2, out2, err2 = sh([args().binary, "export", ckpt, "--format", "safetensors", "-o", st])
check(rc == 0 and rc2 == 0, f"trained 20 steps in BF16 and exported ({rc}: {err.strip()[-300:]}; {rc2}: {err2.strip()})")
rc, out, err = sh([args().binary, "eval", cfg, "--set", f"model.init_from={st}", "--set", "precision.compute=fp32"])
m = re.search(r"^eval loss (\S+) \| perplexity \S+ \| (\d+) window", out, re.M)
rc_t, out_t, err_t = sh([PY, source("scripts", "torch_gpt2_eval.py"), "--weights", st, "--heads", "4", "--seq-len", "48",
                         "--tokens", os.path.join(shards, "data_val_*.bin")])
mt = re.search(r"torch eval loss (\S+) over (\d+) windows", out_t)
ours, theirs = (float(m.group(1)) if m else None), (float(mt.group(1)) if mt else None)
check(ours is not None and theirs is not None and m.group(2) == mt.group(2) and abs(ours - theirs) < 1e-4,
      f"PyTorch's validation loss of the export equals amp_ddp eval's within 1e-4 ({out.strip()} | {out_t.strip()} {err_t.strip()[-300:]})")
done()
