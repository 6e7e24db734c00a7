"""What the PyTorch GPU peers share: PyTorch itself or a JSON error line and exit 0 (no peer, not a
failure), the check for a CUDA device, and the timing loop (CUDA events, warm-up excluded, the
median of `samples` runs of `iters` calls)."""
import json
import statistics
import sys

try:
    import torch
except Exception as e:  # noqa: BLE001 - any import failure means no peer
    print(json.dumps({"bench": "torch", "error": f"PyTorch not available: {e}"}))
    sys.exit(0)


def require_cuda():
    if not torch.cuda.is_available():
        print(json.dumps({"bench": "torch", "error": "PyTorch sees no CUDA device"}))
        sys.exit(0)
    return torch.device("cuda")


def timed_ms(fn, iters, samples=5, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        for _ in range(iters):
            fn()
        t1.record()
        t1.synchronize()
        out.append(t0.elapsed_time(t1) / iters)
    return statistics.median(out)
