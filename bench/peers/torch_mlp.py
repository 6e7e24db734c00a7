"""PyTorch peer for the CPU training benchmark: the same MLP (784-1024-1024-10, ReLU), AdamW,
softmax cross-entropy, batch and thread count as amp_ddp's configs/fmnist_mlp_*.yaml, trained on
the same Fashion-MNIST files, normalized and batched as amp_ddp does (peer_data.py; the tensors are
prepared before timing, each step gathers its batch); FP32, or BF16 through CPU autocast.
Prints one JSON line: {"precision", "threads", "batch", "samples_per_second", "step_ms",
"loss_first", "loss_last", "loss_mean" (of the timed steps), "torch", "blas", "blas_config",
"blas_core", "onednn"}: "blas" is the BLAS library this process actually mapped after running
its GEMMs (read from /proc/self/maps), "blas_config"/"blas_core" what OpenBLAS says of itself.
--check: a few steps at a small size, then exit 1 if the loss is degenerate (peer_data.LossLog)."""
import argparse
import json

import torch

from blas_info import peer_facts, seconds_per_step
from peer_data import Batches, LossLog, fashion_mnist

FMNIST = "/usr/share/datasets/fashion-mnist/"
p = argparse.ArgumentParser()
p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--batch", type=int, default=128)
p.add_argument("--dims", default="784,1024,1024,10")
p.add_argument("--steps", type=int, default=200, help="timed steps (after 20 untimed)")
p.add_argument("--images", default=FMNIST + "train-images-idx3-ubyte.gz")
p.add_argument("--labels", default=FMNIST + "train-labels-idx1-ubyte.gz")
p.add_argument("--check", action="store_true", help="a short run at a small size; exit 1 on a degenerate loss")
a = p.parse_args()
if a.check:
    a.dims, a.batch, a.steps = "784,64,10", 32, 60

torch.manual_seed(0)
torch.set_num_threads(a.threads)
x_all, y_all = fashion_mnist(a.images, a.labels)
if a.check:  # train on the first 4096 samples, measure on the next 1024
    (x_all, x_held), (y_all, y_held) = x_all[:5120].split([4096, 1024]), y_all[:5120].split([4096, 1024])
batches = Batches(len(y_all), a.batch)
dims = [int(d) for d in a.dims.split(",")]
layers = []
for i in range(len(dims) - 1):
    layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
    if i + 2 < len(dims):
        layers.append(torch.nn.ReLU())
model = torch.nn.Sequential(*layers)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
log = LossLog()


def step():
    idx = batches.indices(len(log.losses))
    x, y = x_all[idx], y_all[idx]
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    log.add(loss)


warmup = 20
dt = seconds_per_step(step, warmup, a.steps)
if a.check:
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        held = float(loss_fn(model(x_held), y_held))
    log.check(f"torch_mlp.py --check ({a.precision})", held)
print(json.dumps({"precision": a.precision, "threads": a.threads, "batch": a.batch,
                  "samples_per_second": a.batch / dt, "step_ms": dt * 1e3, **log.report(warmup), **peer_facts()}))
