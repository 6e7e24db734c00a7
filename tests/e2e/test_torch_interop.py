"""Weights between amp_ddp and PyTorch, both ways, on GPT-2 BPE shards of Debian's fortunes
(amp_ddp prepare). Out: a small GPT trained by amp_ddp and exported as safetensors gives the same
validation loss in PyTorch (scripts/torch_gpt2_eval.py: the nanoGPT-style model of bench/peers,
Hugging Face's GPT-2 names, Conv1D weights transposed) as in `amp_ddp eval`, within 1e-4. In: a
GPT-2 that PyTorch initializes (every LayerNorm and bias perturbed) and writes as a Hugging Face
safetensors file and as an llm.c model file loads with model.init_from, and `amp_ddp eval` of each
(FP32) gives PyTorch's loss within 1e-5 relative. Needs Debian's python3-torch (scripts/peer_env.sh installs it; CI does not) and
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

# ---- in: PyTorch's weights, both formats
prefix = os.path.join(base, "torch_gpt2")
rc_t, out_t, err_t = sh([PY, source("scripts", "torch_gpt2_eval.py"), "--write-random", prefix, "--layers", "2",
                         "--heads", "4", "--embd", "64", "--seq-len", "48", "--tokens", os.path.join(shards, "data_val_*.bin")])
mt = re.search(r"torch eval loss (\S+) over (\d+) windows", out_t)
ref = float(mt.group(1)) if mt else None
got = {}
for ext in ("safetensors", "llmc.bin"):
    rc, out, err = sh([args().binary, "eval", cfg, "--set", f"model.init_from={prefix}.{ext}", "--set", "precision.compute=fp32"])
    m = re.search(r"^eval loss (\S+) \|", out, re.M)
    got[ext] = float(m.group(1)) if m else None
    check(ref is not None and got[ext] is not None and abs(got[ext] - ref) <= 1e-5 * ref,
          f"PyTorch's GPT-2 as {ext}: amp_ddp's loss {got[ext]} = PyTorch's {ref} ({rc}: {err.strip()[-300:]} {err_t.strip()[-300:]})")
check(got["safetensors"] == got["llmc.bin"], f"both formats give the same bits of loss ({got})")
done()
