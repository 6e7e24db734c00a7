"""PyTorch peer for the CPU training benchmark: the same MLP (784-1024-1024-10, ReLU), AdamW,
softmax cross-entropy, the same batch and thread count; FP32, or BF16 through CPU autocast.
Prints one JSON line: {"precision", "threads", "batch", "samples_per_second", "step_ms", "torch",
"blas", "blas_config", "blas_core", "mkldnn_bf16"}: "blas" is the BLAS library this process
actually mapped after running its GEMMs (read from /proc/self/maps), "blas_config"/"blas_core"
what OpenBLAS says of itself (its build and the kernel it picked for this CPU)."""
import argparse
import json

import torch

from blas_info import peer_facts, seconds_per_step

p = argparse.ArgumentParser()
p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--batch", type=int, default=128)
p.add_argument("--dims", default="784,1024,1024,10")
p.add_argument("--steps", type=int, default=200)
a = p.parse_args()

torch.manual_seed(0)
torch.set_num_threads(a.threads)
dims = [int(d) for d in a.dims.split(",")]
layers = []
for i in range(len(dims) - 1):
    layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
    if i + 2 < len(dims):
        layers.append(torch.nn.ReLU())
model = torch.nn.Sequential(*layers)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.randn(a.batch, dims[0])
y = torch.randint(0, dims[-1], (a.batch,))


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()


dt = seconds_per_step(step, 20, a.steps)
print(json.dumps({"precision": a.precision, "threads": a.threads, "batch": a.batch,
                  "samples_per_second": a.batch / dt, "step_ms": dt * 1e3, **peer_facts()}))
