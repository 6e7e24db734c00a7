"""Bit-identical training across refactors: params_hash and every logged loss, scale and skip count of
the Fashion-MNIST MLP (fp32, fp16, bf16) and the seed lecture's static/dynamic scaling runs, 300 steps
on 1 and 2 ranks (2 ranks with planted overflows), against the values recorded in tests/golden/.

FP32 sums depend on the GEMM kernels the CPU runs (AVX2 or AVX-512 blocking), so the recording
carries the machine signature it was made on (CPU vector extensions, oneDNN version). The project's
own kernels give the same bits on every instruction set (their unit tests check each set against the
scalar specification); oneDNN's do not, but oneDNN can be held to an older instruction set with
ONEDNN_MAX_CPU_ISA. So on a CPU with every extension of the recording and more (an AVX-512 machine
replaying an AVX2 recording), the runs are made with oneDNN capped to the recorded set, and the test
says so. On a CPU lacking one of the recorded extensions, or with another oneDNN, the comparison
cannot hold and the test says so and skips; record there with `--record` (only when a change is
meant to alter the arithmetic, and say so in the commit; a recording made under a cap, e.g.
`ONEDNN_MAX_CPU_ISA=AVX2 ... --record`, keeps the capped signature)."""
import json
import os
import re
import subprocess
import sys
import e2e_util
from e2e_util import check, done, metrics, run, skip, source, summary, tmpdir

GOLDEN = source("tests", "golden", "mlp_runs.json")
FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


# The recordings a capped oneDNN reproduces: its instruction set's name (ONEDNN_MAX_CPU_ISA) and the
# signature's flags of a CPU with that set (only AVX2 checked so far: an AVX-512-BF16 machine capped
# to AVX2 replays the AVX2 recording bit for bit).
CAPS = {"AVX2": ["avx2", "f16c", "fma"]}


def signature():
    with open("/proc/cpuinfo") as f:
        flags = set(re.search(r"^flags\s*:(.*)$", f.read(), re.M).group(1).split())
    dnnl = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libdnnl2"], capture_output=True, text=True).stdout
    cpu = sorted(x for x in FLAGS if x in flags)
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if cap in CAPS and set(CAPS[cap]) <= set(cpu):  # recording under a cap
        cpu = CAPS[cap]
    return {"cpu_flags": cpu, "onednn": dnnl.strip()}


def replay_cap(recorded, here):
    """The ONEDNN_MAX_CPU_ISA under which this machine replays a recording made on a CPU with fewer
    extensions: None when the signatures are equal, "" when no cap can reproduce the recording."""
    if recorded == here:
        return None
    if recorded["onednn"] != here["onednn"] or not set(recorded["cpu_flags"]) <= set(here["cpu_flags"]):
        return ""
    return next((name for name, flags in CAPS.items() if flags == recorded["cpu_flags"]), "")


OVERFLOWS = "faults.inject_nonfinite=[{step: 40, rank: 1, tensor: fc1.weight, value: inf}, {step: 170, rank: 0, value: nan}]"
CASES = []
for cfg in ("fmnist_mlp_fp32", "fmnist_mlp_fp16", "fmnist_mlp_bf16", "seed_static", "seed_dynamic"):
    for np in (1, 2):
        CASES.append((cfg, np))


def run_case(cfg, np, out, env=None):
    sets = ["run.steps=300", "run.log_interval=10", "run.threads=1", "run.progress=off", "checkpoint.final=false",
            f"run.out_dir={out}", "distributed.hash_interval=100"]
    if np == 2:
        sets.append(OVERFLOWS if cfg.startswith("fmnist") else OVERFLOWS.replace("fc1.weight", "fc1.bias"))
    rc, o, e = run(source("configs", cfg + ".yaml"), sets, np=np if np > 1 else None, timeout=600, env=env)
    if rc != 0:
        return None, e[-500:]
    records = [[m["step"], m["loss"], m["scale"], m["skipped"]] for m in metrics(out) if "loss" in m]
    evals = [[m["step"], m["eval_loss"]] for m in metrics(out) if "eval_loss" in m]
    return {"params_hash": summary(out)["params_hash"], "log": records, "eval": evals}, ""


record = "--record" in sys.argv
sig = signature()
env = None
if not record:
    with open(GOLDEN) as f:
        golden = json.load(f)
    cap = replay_cap(golden["signature"], sig)
    if cap == "":
        skip(f"the golden runs were recorded on {golden['signature']}; this machine is {sig} "
             "(FP32 GEMM sums depend on the CPU's kernels). Record with --record on this kind of machine.")
    if cap:
        env = {"ONEDNN_MAX_CPU_ISA": cap}
        print(f"this machine is {sig}; the golden runs were recorded on {golden['signature']}: replaying them "
              f"with oneDNN capped to it (ONEDNN_MAX_CPU_ISA={cap}); the project's kernels run their widest set")

d = tmpdir()
results = {}
for cfg, np in CASES:
    key = f"{cfg} np={np}"
    got, err = run_case(cfg, np, os.path.join(d, key.replace(" ", "_").replace("=", "")), env)
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
