"""Which BLAS a PyTorch peer process actually runs, and the timing loop and report fields the
throughput peers share."""
import ctypes
import time


def blas_in_use():
    """The libblas.so.3 this process mapped (libtorch's GEMMs go through it; LAPACK may map another
    library beside it), and what OpenBLAS reports of itself when that one is OpenBLAS."""
    libs, others = set(), set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = path.rsplit("/", 1)[-1]
            if name.startswith("libblas.so"):
                libs.add(path)
            elif name.startswith(("libopenblas", "libmkl_rt", "libblis")):
                others.add(path)
    config = core = ""
    for path in sorted(libs):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_config.restype = ctypes.c_char_p
            lib.openblas_get_corename.restype = ctypes.c_char_p
            config = lib.openblas_get_config().decode()
            core = lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            pass
    return sorted(libs), config, core


def seconds_per_step(step, warmup, steps):
    """Mean wall time of step() over `steps` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


def peer_facts():
    """What the peer ran: torch version, the BLAS it mapped, and the oneDNN (MKL-DNN) build its
    BF16 autocast uses where it has one (whether that is fast on this CPU the benchmark measures)."""
    import re
    import torch
    libs, config, core = blas_in_use()
    onednn = re.search(r"MKL-DNN v([0-9.]+)", torch.__config__.show())
    return {"torch": torch.__version__, "blas": libs, "blas_config": config, "blas_core": core,
            "onednn": (onednn.group(1) if onednn else "") if torch.backends.mkldnn.is_available() else ""}
