"""PyTorch peer of the GPU benchmarks, measured on the same GPU in the same run: one training step
of the same MLP (ReLU, AdamW, softmax cross-entropy, same batch) under torch.autocast, with
GradScaler for fp16; and torch.matmul on the step's GEMM shapes (cuBLAS through PyTorch). Timed
with CUDA events, warm-up excluded, median of repeats. One JSON line per measurement.
Usage: torch_step.py --dims 784,1024,1024,10 --batch 128 --dtype f16|bf16 [--gemm] [--iters 50]"""
import argparse
import json

from cuda_timing import require_cuda, timed_ms, torch

p = argparse.ArgumentParser()
p.add_argument("--dims", default="784,1024,1024,10")
p.add_argument("--batch", type=int, default=128)
p.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
p.add_argument("--iters", type=int, default=50)
p.add_argument("--gemm", action="store_true", help="also time torch.matmul on the step's GEMM shapes")
a = p.parse_args()

dev = require_cuda()
dt = torch.float16 if a.dtype == "f16" else torch.bfloat16
dims = [int(d) for d in a.dims.split(",")]
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False


layers = []
for i in range(len(dims) - 1):
    layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
    if i + 2 < len(dims):
        layers.append(torch.nn.ReLU())
model = torch.nn.Sequential(*layers).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
scaler = torch.amp.GradScaler("cuda", enabled=a.dtype == "f16", init_scale=1024.0)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.randn(a.batch, dims[0], device=dev)
y = torch.randint(0, dims[-1], (a.batch,), device=dev)


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=dt):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


ms = timed_ms(step, a.iters)
params = sum(p.numel() for p in model.parameters())
print(json.dumps({"bench": "torch_step", "model": "-".join(map(str, dims)), "batch": a.batch, "dtype": a.dtype,
                  "params": params, "step_ms": ms, "torch": torch.__version__}))

if a.gemm:
    B = a.batch
    for layer in range(len(dims) - 1):
        i, o = dims[layer], dims[layer + 1]
        xs = torch.randn(B, i, device=dev, dtype=dt)
        w = torch.randn(o, i, device=dev, dtype=dt)
        g = torch.randn(B, o, device=dev, dtype=dt)
        ops = [("fwd", lambda: torch.matmul(xs, w.t()), (o, B, i)),
               ("bwd_weight", lambda: torch.matmul(g.t(), xs), (i, o, B))]
        if layer > 0:
            ops.append(("bwd_input", lambda: torch.matmul(g, w), (i, B, o)))
        for name, fn, (m, n, k) in ops:
            t = timed_ms(fn, a.iters)
            print(json.dumps({"bench": "torch_gemm", "layer": layer + 1, "op": name, "m": m, "n": n, "k": k,
                              "dtype": a.dtype, "torch_us": t * 1e3, "torch_tflops": 2.0 * m * n * k / (t * 1e-3) / 1e12}))
