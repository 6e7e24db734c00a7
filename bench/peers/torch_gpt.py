"""PyTorch peer of the GPT benchmark: a nanoGPT-style decoder-only transformer with the same shapes
as amp_ddp's (token + position embeddings, pre-LayerNorm blocks of causal multi-head attention and a
GELU (tanh) MLP of width 4C, final LayerNorm, LM head tied to the token embedding), AdamW, mean
cross-entropy, GPT-2's initialization; the same batch, context and thread count; FP32, or BF16 through CPU autocast. It
trains on the text amp_ddp's config trains on (data.text_files of --config, byte tokens, windows
and batches as amp_ddp draws them: peer_data.py; tensors prepared before timing).
Prints one JSON line: {"precision", "threads", "batch", "tokens_per_second", "step_ms",
"loss_first", "loss_last", "loss_mean" (of the timed steps), "torch", "blas", "blas_config",
"blas_core", "onednn"}.
--check: a few steps of a small model on the first 260 kB of the text (its last 256 windows held
out), then exit 1 if the loss is degenerate (peer_data.LossLog)."""
import argparse
import json
import os

import torch
import torch.nn.functional as F
import yaml

from blas_info import peer_facts, seconds_per_step
from nanogpt import GPT, gpt2_init
from peer_data import Batches, LossLog, text_windows

HERE = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=64)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--embd", type=int, default=128)
p.add_argument("--steps", type=int, default=50, help="timed steps (after 5 untimed)")
p.add_argument("--config", default=os.path.join(HERE, "..", "..", "configs", "gpt_fortunes_fp32.yaml"),
               help="the amp_ddp config whose data.text_files to train on")
p.add_argument("--check", action="store_true", help="a short run at a small size; exit 1 on a degenerate loss")
a = p.parse_args()
if a.check:
    a.layers, a.heads, a.embd, a.seq, a.batch, a.steps = 2, 2, 32, 32, 8, 75

torch.manual_seed(0)
torch.set_num_threads(a.threads)
files = yaml.safe_load(open(a.config))["data"]["text_files"]
windows = text_windows(files, a.seq, limit_bytes=260_000 if a.check else 0)
if a.check:  # train on the first windows, measure on the last 256
    windows, held = windows[:-256], windows[-256:]
vocab = 256  # byte tokens
batches = Batches(len(windows), a.batch)
model = GPT(vocab, a.seq, a.layers, a.heads, a.embd)
gpt2_init(model, a.layers)  # as amp_ddp: the initial loss is ln(256)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3 if a.check else 1e-3, weight_decay=0.1)
log = LossLog()


def step():
    w = windows[batches.indices(len(log.losses))]
    x, y = w[:, :-1], w[:, 1:]
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))
    loss.backward()
    opt.step()
    log.add(loss)


warmup = 5
dt = seconds_per_step(step, warmup, a.steps)
if a.check:
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        held_logits = model(held[:, :-1])
    log.check(f"torch_gpt.py --check ({a.precision})",
              float(F.cross_entropy(held_logits.float().view(-1, vocab), held[:, 1:].reshape(-1))))
print(json.dumps({"precision": a.precision, "threads": a.threads, "batch": a.batch,
                  "tokens_per_second": a.batch * a.seq / dt, "step_ms": dt * 1e3, **log.report(warmup),
                  **peer_facts()}))
