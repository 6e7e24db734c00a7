"""What the PyTorch throughput peers share besides the timing (blas_info.py): the data amp_ddp
trains on, prepared as tensors before any step is timed, batches drawn the way amp_ddp's sampler
draws them, and the loss record that shows a degenerate run.

- Fashion-MNIST (IDX, raw or gzip): pixels / 255, then amp_ddp's `data.normalize: global`: one mean
  and one standard deviation over every training pixel, in double, the constant feature's std 1.
- Text: the files read as bytes and concatenated (byte-level tokens, vocabulary 256), cut into
  non-overlapping windows of seq + 1 tokens (T inputs and their T next-token targets).
- Batches: one seeded permutation per epoch, consecutive slices of `batch` samples, the incomplete
  remainder dropped (amp_ddp's ShardedSampler on one rank; the permutation comes from PyTorch's
  generator, so the order is the same scheme, not the same samples). Each step gathers its batch
  by index, as amp_ddp's stage() does.
- LossLog: every step's loss (a detached tensor: no synchronization inside the timed loop), from
  which the first, last and mean loss of the timed steps are reported, and check() refuses a run
  whose loss reached 0 or stopped changing (a peer memorizing one batch: what a fixed random batch
  did before)."""
import gzip
import math
import struct

import torch


def read_idx(path):
    """An IDX file (raw or .gz) as a tensor of its element type's values."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    t = torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8)
    return t.view(*dims)


def fashion_mnist(images, labels, limit=0):
    """(x [n, 784] float32 normalized as amp_ddp's `global` mode, y [n] int64)."""
    x = read_idx(images).reshape(-1, 28 * 28).to(torch.float64) / 255.0
    y = read_idx(labels).to(torch.int64)
    if limit:
        x, y = x[:limit], y[:limit]
    mean = x.mean()
    std = x.sub(mean).pow(2).mean().sqrt()
    x = (x - mean) / (std if std > 0 else 1.0)
    return x.to(torch.float32).contiguous(), y.contiguous()


def text_windows(paths, seq, limit_bytes=0):
    """[n, seq + 1] int64 windows of the concatenated bytes of the files."""
    stream = b"".join(open(p, "rb").read() for p in paths)
    if limit_bytes:
        stream = stream[:limit_bytes]
    tokens = torch.frombuffer(bytearray(stream), dtype=torch.uint8).to(torch.int64)
    n = (len(tokens) - 1) // seq
    idx = torch.arange(n)[:, None] * seq + torch.arange(seq + 1)[None, :]
    return tokens[idx].contiguous()


class Batches:
    """Batch i of a run: slice i % steps_per_epoch of epoch i // steps_per_epoch's permutation."""

    def __init__(self, n, batch, seed=1):
        if n < batch:
            raise ValueError(f"{n} samples cannot make one batch of {batch}")
        self.n, self.batch, self.per_epoch = n, batch, n // batch
        self.gen = torch.Generator().manual_seed(seed)
        self.epoch, self.perm = -1, None

    def indices(self, i):
        epoch = i // self.per_epoch
        while self.epoch < epoch:  # epochs in order: the generator's sequence is the run's
            self.perm = torch.randperm(self.n, generator=self.gen)
            self.epoch += 1
        j = i % self.per_epoch
        return self.perm[j * self.batch:(j + 1) * self.batch]


class LossLog:
    def __init__(self):
        self.losses = []

    def add(self, loss):
        self.losses.append(loss.detach())

    def values(self):
        return [float(v) for v in self.losses]

    def report(self, first_timed):
        """First, last and mean loss of the timed steps (those from index first_timed on)."""
        timed = self.values()[first_timed:]
        return {"loss_first": timed[0], "loss_last": timed[-1], "loss_mean": sum(timed) / len(timed)}

    def check(self, what, heldout):
        """Raises SystemExit(1) naming the fault when the run is degenerate: a loss not finite, 0,
        no longer changing over the last steps (Adam's moments at 0), not falling, or far below
        the model's loss on samples it never trained on (heldout: a memorized batch)."""
        v = self.values()
        tail = v[-10:]
        changes = sum(1 for a, b in zip(tail, tail[1:]) if abs(a - b) > 1e-6 * max(abs(a), 1e-30))
        recent = sum(v[-10:]) / len(v[-10:])
        faults = []
        if not all(math.isfinite(x) for x in v + [heldout]):
            faults.append("a loss is not finite")
        if min(v) < 1e-3:
            faults.append(f"the loss reached {min(v):.3g}")
        if changes < len(tail) // 2:
            faults.append(f"the loss stopped changing ({changes} of {len(tail) - 1} last steps changed it)")
        if not recent < v[0]:
            faults.append(f"the loss did not fall ({v[0]:.4f} -> {recent:.4f})")
        if recent < 0.5 * heldout:
            faults.append(f"the training loss {recent:.4f} is far below the held-out loss {heldout:.4f} (memorized)")
        print(f"{what}: {len(v)} steps, loss {v[0]:.4f} -> {recent:.4f} (mean of the last 10; min {min(v):.4f}),"
              f" held-out {heldout:.4f}" + ("" if not faults else "; FAULT: " + "; ".join(faults)))
        if faults:
            raise SystemExit(1)
