"""PyTorch peer of the GPT benchmark: a nanoGPT-style decoder-only transformer with the same shapes
as amp_ddp's (token + position embeddings, pre-LayerNorm blocks of causal multi-head attention and a
GELU (tanh) MLP of width 4C, final LayerNorm, LM head tied to the token embedding), AdamW, mean
cross-entropy; the same batch, context and thread count; FP32, or BF16 through CPU autocast.
Prints one JSON line: {"precision", "threads", "batch", "tokens_per_second", "step_ms", "torch",
"blas", "blas_config", "blas_core", "mkldnn_bf16"}."""
import argparse
import json

import torch
import torch.nn.functional as F

from blas_info import peer_facts, seconds_per_step
from nanogpt import GPT

p = argparse.ArgumentParser()
p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=64)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--embd", type=int, default=128)
p.add_argument("--vocab", type=int, default=256)
p.add_argument("--steps", type=int, default=50)
a = p.parse_args()
torch.manual_seed(0)
torch.set_num_threads(a.threads)


model = GPT(a.vocab, a.seq, a.layers, a.heads, a.embd)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
x = torch.randint(0, a.vocab, (a.batch, a.seq))
y = torch.randint(0, a.vocab, (a.batch, a.seq))


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.view(-1))
    loss.backward()
    opt.step()


dt = seconds_per_step(step, 5, a.steps)
print(json.dumps({"precision": a.precision, "threads": a.threads, "batch": a.batch,
                  "tokens_per_second": a.batch * a.seq / dt, "step_ms": dt * 1e3, **peer_facts()}))
