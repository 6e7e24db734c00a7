"""The thread count does not change a bit of training: the char GPT in FP32 (explicit attention,
whose batched products oneDNN's own threading gave 3 threads other bits than 1) and in BF16, a few
steps at run.threads 1, 2 and 3, end with the same params_hash and the same logged losses. Run on
the CPU's own oneDNN kernels, and again with oneDNN held to AVX2 (its jit GEMM, what AVX2-only
CPUs run) where the CPU has AVX-512: the test says which it ran."""
import re
from e2e_util import QUICK_EVAL, check, done, records, run, source, summary, tmpdir

base = tmpdir()
with open("/proc/cpuinfo") as f:
    flags = set(re.search(r"^flags\s*:(.*)$", f.read(), re.M).group(1).split())
isas = [("native", None)] + ([("AVX2", "AVX2")] if "avx512f" in flags else [])
print("oneDNN instruction sets run: " + ", ".join(name for name, _ in isas)
      + ("" if "avx512f" in flags else " (no AVX-512 here: the native run is the AVX2 path)"))

for name, cap in isas:
    for cfg in ("gpt_fortunes_fp32.yaml", "gpt_fortunes_bf16.yaml"):
        got = {}
        for threads in (1, 2, 3):
            out = f"{base}/{name}_{cfg}_{threads}"
            rc, o, e = run(source("configs", cfg),
                           ["run.steps=6", "run.log_interval=2", "run.eval_interval=0", "sample.tokens=0",
                            "run.progress=off", "checkpoint.final=false", f"run.threads={threads}", f"run.out_dir={out}"]
                           + QUICK_EVAL,
                           env={"ONEDNN_MAX_CPU_ISA": cap} if cap else None)
            check(rc == 0, f"{name} {cfg} at {threads} thread(s) runs (rc {rc}: {e.strip()[-300:]})")
            got[threads] = (summary(out)["params_hash"], records(out)) if rc == 0 else None
        for threads in (2, 3):
            same = got[1] is not None and got[threads] == got[1]
            check(same, f"{name} {cfg}: {threads} threads give the bits of 1 (params_hash "
                  f"{got[threads][0] if got[threads] else '-'} vs {got[1][0] if got[1] else '-'})")
done()
