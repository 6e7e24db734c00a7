"""PyTorch peer of the GPT step on the GPU, measured in the same run as amp_ddp's: one training
step (forward, cross-entropy, backward, AdamW) of the nanoGPT-style model of bench/peers/nanogpt.py
with the shapes given (default GPT-2 124M: 12 x 768, 12 heads, seq 1024, vocabulary 50257, 16
sequences), under torch.autocast (bf16, or fp16 with GradScaler), on random tokens. Two attention
variants: written out as amp_ddp computes it ("explicit") and PyTorch's fused
scaled_dot_product_attention ("sdpa": the peer at its best). Timed with CUDA events, warm-up
excluded, median of repeats. One JSON line per variant.
Usage: torch_gpt_step.py [--layers 12 --embd 768 --heads 12 --seq 1024 --vocab 50257 --batch 16]
                         [--dtype bf16|f16] [--iters 10]"""
import argparse
import json
import os
import sys

from cuda_timing import require_cuda, timed_ms, torch
import torch.nn.functional as F  # noqa: E402 - after cuda_timing, which reports a missing PyTorch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
from nanogpt import GPT, gpt2_init  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=12)
p.add_argument("--embd", type=int, default=768)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--vocab", type=int, default=50257)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--dtype", choices=["f16", "bf16"], default="bf16")
p.add_argument("--iters", type=int, default=10)
a = p.parse_args()
dev = require_cuda()
dt = torch.float16 if a.dtype == "f16" else torch.bfloat16
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev)
x, y = idx[:, :-1], idx[:, 1:]


def adamw(params):
    try:  # the fused CUDA AdamW where this PyTorch has it
        return torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True), "fused"
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1), "foreach"


def measure(variant):
    """One variant's JSON record; the model and optimizer are freed when it returns."""
    model = GPT(a.vocab, a.seq, a.layers, a.heads, a.embd, sdpa=variant == "sdpa").to(dev)
    gpt2_init(model, a.layers)
    opt, opt_kind = adamw(model.parameters())
    scaler = torch.amp.GradScaler("cuda", enabled=a.dtype == "f16")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dt):
            loss = F.cross_entropy(model(x).float().view(-1, a.vocab), y.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    ms = timed_ms(step, a.iters, samples=3, warmup=3)
    return {"bench": "torch_gpt_step", "attention": variant, "layers": a.layers, "embd": a.embd, "seq": a.seq,
            "vocab": a.vocab, "batch": a.batch, "dtype": a.dtype, "step_ms": ms,
            "tokens_per_s": a.batch * a.seq / (ms * 1e-3), "optimizer": opt_kind, "torch": torch.__version__}


for variant in ("explicit", "sdpa"):
    if variant == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        record = {"bench": "torch_gpt_step", "attention": variant,
                  "error": f"PyTorch {torch.__version__} has no scaled_dot_product_attention"}
    else:
        try:
            record = measure(variant)
        except Exception as e:  # noqa: BLE001 - report and go on to the other variant
            record = {"bench": "torch_gpt_step", "attention": variant, "error": str(e)[:300]}
    print(json.dumps(record), flush=True)
    torch.cuda.empty_cache()
