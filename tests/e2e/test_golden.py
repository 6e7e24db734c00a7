"""Bit-identical training across refactors: params_hash and every logged loss, scale and skip count of
the Fashion-MNIST MLP (fp32, fp16, bf16) and the seed lecture's static/dynamic scaling runs, 300 steps
on 1 and 2 ranks (2 ranks with planted overflows), against the values recorded in tests/golden/.

FP32 sums depend on the GEMM kernels the CPU runs (AVX2 or AVX-512 blocking), so the recording
carries the machine signature it was made on (CPU vector extensions, oneDNN version). On a machine
with another signature the comparison cannot hold and the test says so and skips; record there with
`--record` (only when a change is meant to alter the arithmetic, and say so in the commit)."""
import json
import os
import re
import subprocess
import sys
import e2e_util
from e2e_util import check, done, metrics, run, skip, source, summary, tmpdir

GOLDEN = source("tests", "golden", "mlp_runs.json")
FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def signature():
    with open("/proc/cpuinfo") as f:
        flags = set(re.search(r"^flags\s*:(.*)$", f.read(), re.M).group(1).split())
    dnnl = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libdnnl2"], capture_output=True, text=True).stdout
    return {"cpu_flags": sorted(x for x in FLAGS if x in flags), "onednn": dnnl.strip()}


OVERFLOWS = "faults.inject_nonfinite=[{step: 40, rank: 1, tensor: fc1.weight, value: inf}, {step: 170, rank: 0, value: nan}]"
CASES = []
for cfg in ("fmnist_mlp_fp32", "fmnist_mlp_fp16", "fmnist_mlp_bf16", "seed_static", "seed_dynamic"):
    for np in (1, 2):
        CASES.append((cfg, np))


def run_case(cfg, np, out):
    sets = ["run.steps=300", "run.log_interval=10", "run.threads=1", "run.progress=off", "checkpoint.final=false",
            f"run.out_dir={out}", "distributed.hash_interval=100"]
    if np == 2:
        sets.append(OVERFLOWS if cfg.startswith("fmnist") else OVERFLOWS.replace("fc1.weight", "fc1.bias"))
    rc, o, e = run(source("configs", cfg + ".yaml"), sets, np=np if np > 1 else None, timeout=600)
    if rc != 0:
        return None, e[-500:]
    records = [[m["step"], m["loss"], m["scale"], m["skipped"]] for m in metrics(out) if "loss" in m]
    evals = [[m["step"], m["eval_loss"]] for m in metrics(out) if "eval_loss" in m]
    return {"params_hash": summary(out)["params_hash"], "log": records, "eval": evals}, ""


record = "--record" in sys.argv
sig = signature()
if not record:
    with open(GOLDEN) as f:
        golden = json.load(f)
    if golden["signature"] != sig:
        skip(f"the golden runs were recorded on {golden['signature']}; this machine is {sig} "
             "(FP32 GEMM sums depend on the CPU's kernels). Record with --record on this kind of machine.")

d = tmpdir()
results = {}
for cfg, np in CASES:
    key = f"{cfg} np={np}"
    got, err = run_case(cfg, np, os.path.join(d, key.replace(" ", "_").replace("=", "")))
    check(got is not None, f"{key}: the run succeeds ({err})")
    if got is None:
        continue
    results[key] = got
    if not record:
        want = golden["runs"][key]
        same_log = got["log"] == want["log"]
        first_diff = next((i for i, (a, b) in enumerate(zip(got["log"], want["log"])) if a != b), None)
        check(got["params_hash"] == want["params_hash"] and same_log and got["eval"] == want["eval"],
              f"{key}: params_hash {got['params_hash']} (recorded {want['params_hash']}), {len(got['log'])} logged "
              f"losses/scales identical: {same_log}" + ("" if first_diff is None else
                                                         f" (first difference: {got['log'][first_diff]} vs {want['log'][first_diff]})"))
        if np == 2:
            check(got["log"][-1][3] >= 2, f"{key}: the planted overflows were skipped ({got['log'][-1][3]} skipped)")

if record and not e2e_util.failures:  # only a complete, successful set is recorded
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    with open(GOLDEN, "w") as f:
        json.dump({"signature": sig, "steps": 300, "runs": results}, f, indent=1)
    print(f"recorded {len(results)} runs in {GOLDEN}")
done()
