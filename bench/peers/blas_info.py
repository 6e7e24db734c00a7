"""Which BLAS a PyTorch peer process actually runs (shared by the peers of the benchmarks)."""
import ctypes


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
