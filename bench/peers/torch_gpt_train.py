"""PyTorch peer of the GPT validation-loss comparison: trains the nanoGPT-style model (nanogpt.py)
on the same data, split, windows and hyper-parameters as an amp_ddp GPT config, and prints its
validation losses. Read from the config: data.text_files, data.eval_fraction, model.n_layer /
n_head / n_embd / seq_len, run.steps / eval_interval / seed, optimizer lr / beta1 / beta2 / eps /
weight_decay / grad_clip / warmup_steps / min_lr (schedule warmup_cosine), data.batch_size x --ranks
(the global batch). As amp_ddp: byte tokens of the files concatenated, the last eval_fraction of
the stream held out, non-overlapping windows of seq_len + 1, a seeded permutation per epoch with
the remainder dropped, GPT-2 initialization, AdamW with decay on every parameter, clipping by the
global norm, mean cross-entropy per token over every evaluation window. The sample order and the
initial weights come from PyTorch's generator, so the runs agree in distribution, not bit for bit.
Prints one JSON line: {"eval": {step: loss}, "train_seconds", "torch", "threads"}."""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
import yaml

from nanogpt import GPT, gpt2_init

p = argparse.ArgumentParser()
p.add_argument("config")
p.add_argument("--ranks", type=int, default=1, help="the amp_ddp run's ranks (global batch = batch_size x ranks)")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--steps", type=int, default=0, help="override run.steps")
a = p.parse_args()
cfg = yaml.safe_load(open(a.config))
run, model_c, data, opt_c = cfg["run"], cfg["model"], cfg["data"], cfg["optimizer"]
steps = a.steps or run["steps"]
seed = run.get("seed", 1)
torch.manual_seed(seed)
torch.set_num_threads(a.threads)

stream = b"".join(open(f, "rb").read() for f in data["text_files"])
tokens = torch.tensor(list(stream), dtype=torch.long)
n_eval = round(data["eval_fraction"] * len(tokens))
train, evals = tokens[: len(tokens) - n_eval], tokens[len(tokens) - n_eval:]
T = model_c["seq_len"]


def windows(t):
    n = (len(t) - 1) // T
    idx = torch.arange(n)[:, None] * T + torch.arange(T + 1)[None, :]
    return t[idx]


train_w, eval_w = windows(train), windows(evals)
L, H, C = model_c["n_layer"], model_c["n_head"], model_c["n_embd"]
model = GPT(256, T, L, H, C)
gpt2_init(model, L)
opt = torch.optim.AdamW(model.parameters(), lr=opt_c["lr"], betas=(opt_c.get("beta1", 0.9), opt_c.get("beta2", 0.999)),
                        eps=opt_c.get("eps", 1e-8), weight_decay=opt_c.get("weight_decay", 0.0))
batch = data["batch_size"] * a.ranks
per_epoch = len(train_w) // batch
lr, min_lr, warm = opt_c["lr"], opt_c.get("min_lr", 0.0), opt_c.get("warmup_steps", 0)


def lr_at(s):  # src/optim/lr_schedule.h, warmup_cosine
    if warm > 0 and s <= warm:
        return lr * s / warm
    t = min(1.0, (s - warm) / (steps - warm))
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


@torch.no_grad()
def evaluate():
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(eval_w), 256):
        w = eval_w[i: i + 256]
        logits = model(w[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, 256), w[:, 1:].reshape(-1), reduction="sum").item()
        count += w[:, 1:].numel()
    model.train()
    return total / count


out, perm, t0 = {}, None, time.perf_counter()
for s in range(1, steps + 1):
    e, k = divmod(s - 1, per_epoch)
    if k == 0:
        perm = torch.randperm(len(train_w))
    w = train_w[perm[k * batch: (k + 1) * batch]]
    for g in opt.param_groups:
        g["lr"] = lr_at(s)
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(w[:, :-1]).reshape(-1, 256), w[:, 1:].reshape(-1))
    loss.backward()
    if opt_c.get("grad_clip", 0) > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), opt_c["grad_clip"])
    opt.step()
    if s % run.get("eval_interval", steps) == 0 or s == steps:
        out[s] = round(evaluate(), 5)
print(json.dumps({"eval": out, "train_seconds": round(time.perf_counter() - t0, 1), "torch": torch.__version__,
                  "threads": a.threads}))
