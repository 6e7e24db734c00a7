"""The CUDA backend as a module of its own (CUDA builds): amp_ddp opens libamp_cuda.so only when a
run needs a GPU (src/backend/backend_cuda_factory.cpp), so a run on the CPU never loads the CUDA
libraries (their start-up alone costs about 0.4 s of CPU a process) and runs where they are missing.
- amp_ddp itself needs no CUDA library (no libcudart, libcublas, libcublasLt or libnccl among its
  DT_NEEDED entries);
- with no NVIDIA driver here, a run with run.device auto trains on the CPU, and neither it nor
  --help loads the module or a CUDA library (the dynamic loader's own record, LD_DEBUG=files);
  --version does load it (the record's control), and names it;
- run.device cuda loads it: every symbol it takes from amp_ddp resolves at once (RTLD_NOW), and
  the CUDA runtime says why there is no device: a device error (exit 7) that names it;
- AMP_CUDA_MODULE at a missing file, or at a library that is not the module: run.device cuda is a
  device error naming the path and why, auto still trains on the CPU, --version says so;
- a copy of amp_ddp in another folder finds the module where the build put it; one with a
  libamp_cuda.so beside it takes that one.
Skipped in a build without CUDA; the checks that need the driver to be absent are skipped (visibly)
where it is present."""
import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess
from e2e_util import args, check, done, run, skip, tmpdir

binary = os.path.abspath(args().binary)
module = os.path.join(os.path.dirname(binary), "libamp_cuda.so")
p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
if "CUDA: off" in p.stdout:
    skip("a build without CUDA (--version: CUDA: off)")
check(p.returncode == 0 and re.search(r"CUDA: on \(arch [0-9,]+, runtime [0-9.]+\), NCCL: (on|off)", p.stdout) is not None,
      f"--version loads the module and names it ({p.stdout.strip()})")
check(os.path.exists(module), f"the module is beside amp_ddp ({module})")

needed = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True).stdout
libs = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", needed)
cuda_libs = [n for n in libs if re.match(r"lib(cudart|cublas|cublasLt|nccl|cuda)\.so", n)]
check(libs and not cuda_libs, f"amp_ddp needs no CUDA library ({', '.join(libs)})")

try:
    ctypes.CDLL("libcuda.so.1")
    driver = True
except OSError:
    driver = False

base = tmpdir()
cfg = os.path.join(base, "tiny.yaml")
with open(cfg, "w") as f:
    f.write("run: {name: tiny, steps: 3, log_interval: 1, progress: off}\n"
            "model: {hidden: [16]}\n"
            "data: {format: synthetic, batch_size: 8, synthetic: {train_samples: 64, eval_samples: 16}}\n")


def loaded(stderr):
    """The module and CUDA libraries the dynamic loader's record (LD_DEBUG=files) says it opened."""
    return sorted(set(re.findall(r"file=\S*(libamp_cuda\.so|libcudart\.so\S*|libcublas\S*|libnccl\S*)", stderr)))


trace = {"LD_DEBUG": "files"}
rc, out, err = run("--version", env=trace)
check(rc == 0 and "libamp_cuda.so" in loaded(err), f"the loader's record shows --version opening the module ({loaded(err)})")
if driver:
    print("note: an NVIDIA driver is here (libcuda.so.1 loads): a run with run.device auto may use the GPU, so the "
          "checks that a CPU run loads nothing are skipped")
else:
    rc, out, err = run("--help", env=trace)
    check(rc == 0 and not loaded(err), f"--help opens no CUDA library ({loaded(err)})")
    rc, out, err = run(cfg, [f"run.out_dir={os.path.join(base, 'auto')}"], env=trace)
    check(rc == 0 and "x cpu" in out and not loaded(err),
          f"run.device auto without a driver: trains on the CPU, opening no CUDA library ({rc}, {loaded(err)})")

    rc, out, err = run(cfg, [f"run.out_dir={os.path.join(base, 'cuda')}", "run.device=cuda"])
    check(rc == 7 and "run.device is cuda but no CUDA device is visible (cudaGetDeviceCount: " in err,
          f"run.device cuda: the module loads and the CUDA runtime says why there is no device ({rc}: {err.strip()[-300:]})")
    check(not os.path.exists(os.path.join(base, "cuda")), "that refused run left no folder")

    for what, path, why in (("a missing file", os.path.join(base, "nothing", "libamp_cuda.so"), "No such file"),
                            ("a library that is not the module", ctypes.util.find_library("z") or "libz.so.1",
                             "no amp_cuda_module_v1")):
        env = {"AMP_CUDA_MODULE": path}
        rc, out, err = run(cfg, [f"run.out_dir={os.path.join(base, 'm1')}", "run.device=cuda"], env=env)
        check(rc == 7 and f"run.device is cuda but the CUDA backend (libamp_cuda.so) cannot be loaded: {path}" in err and why in err,
              f"AMP_CUDA_MODULE at {what}: run.device cuda is a device error naming it ({rc}: {err.strip()[-300:]})")
        rc, out, err = run(cfg, [f"run.out_dir={os.path.join(base, 'm2_' + str(len(why)))}"], env=env)
        check(rc == 0 and "x cpu" in out, f"AMP_CUDA_MODULE at {what}: run.device auto trains on the CPU ({rc})")
        rc, out, err = run("--version", env=env)
        check(rc == 0 and "CUDA: built, but the CUDA backend (libamp_cuda.so) cannot be loaded" in out and why in out,
              f"AMP_CUDA_MODULE at {what}: --version says so ({out.strip()})")

# A copy elsewhere: the module where the build put it; a module beside the copy first.
elsewhere = os.path.join(base, "bin")
os.makedirs(elsewhere)
shutil.copy2(binary, os.path.join(elsewhere, "amp_ddp"))
p = subprocess.run([os.path.join(elsewhere, "amp_ddp"), "--version"], capture_output=True, text=True, timeout=60,
                   env=dict(os.environ, LD_DEBUG="files"))
check(p.returncode == 0 and "CUDA: on" in p.stdout and f"file={module}" in p.stderr,
      f"a copy of amp_ddp in another folder finds the module where the build put it ({p.stdout.strip()})")
shutil.copy2(module, os.path.join(elsewhere, "libamp_cuda.so"))
p = subprocess.run([os.path.join(elsewhere, "amp_ddp"), "--version"], capture_output=True, text=True, timeout=60,
                   env=dict(os.environ, LD_DEBUG="files"))
check(p.returncode == 0 and "CUDA: on" in p.stdout and f"file={os.path.join(elsewhere, 'libamp_cuda.so')}" in p.stderr,
      "with a libamp_cuda.so beside the copy, the copy takes that one")
done()
