"""scripts/gpu_check.sh --dry-run: the GPU check's phases walked with the CPU standing in for the
device (the Release build's amp_device_logic_tests, run.device cpu, shrunk runs), so that the
script's order, deadlines, FAIL-not-SKIP rules and report format are checked before a GPU ever runs
it. Three runs:
  1. a clean dry run: exit 0, every phase in order with its deadline in the plan line, every device
     test group PASS (nccl: noted absent, the CPU twin has none), the headline and end-to-end lines,
     the summary, $OUT's three files (report, summary, logs archive with the logs in it), within
     its budget;
  2. a device test group that hangs: it is killed at the tests' deadline and FAILs, the later
     groups FAIL as not run, the headline and end-to-end phases still run and pass, exit 1, and the
     whole run ends within its budget;
  3. a device test binary that cannot start: FAIL (never a skip), exit 1.
Runs 2 and 3 stop after the phases they check (AMP_GPU_CHECK_UNTIL e2e and tests)."""
import os
import re
import subprocess
import tarfile
import time
from e2e_util import args, check, done, source, tmpdir

SCRIPT = source("scripts", "gpu_check.sh")
BUILD = os.path.dirname(os.path.abspath(args().binary))
GROUPS = ["cast", "gemm", "ops", "tops", "loss", "amp", "optim", "graph", "model", "trainer", "comm"]


def dry_run(budget, fake=None, until=None):
    """Returns the exit code, the report, $OUT, the seconds taken and what the run left in its
    TMPDIR (Open MPI's session folders aside)."""
    out, tmp = tmpdir(), tmpdir()
    env = dict(os.environ, OUT=out, TMPDIR=tmp, AMP_GPU_CHECK_BUDGET=str(budget), AMP_GPU_CHECK_DRY_BUILD=BUILD)
    for k in ("AMP_GPU_CHECK_FAKE", "AMP_GPU_CHECK_UNTIL"):
        env.pop(k, None)
    if fake:
        env["AMP_GPU_CHECK_FAKE"] = fake
    if until:
        env["AMP_GPU_CHECK_UNTIL"] = until
    t0 = time.time()
    p = subprocess.run(["bash", SCRIPT, "--dry-run"], capture_output=True, text=True, env=env, timeout=budget + 60)
    wall = time.time() - t0
    report = open(os.path.join(out, "gpu_check.txt")).read() if os.path.exists(os.path.join(out, "gpu_check.txt")) else ""
    left = sorted(n for n in os.listdir(tmp) if not n.startswith("ompi."))
    return p.returncode, report, out, wall, left


# 1. Clean.
rc, report, out, wall, left = dry_run(560)
check(rc == 0, f"clean dry run exits 0 (got {rc}); report tail: {report[-1500:]}")
check("DRY RUN" in report.splitlines()[0], "the report's first line says it is a dry run")
plan = re.search(r"plan \(seconds after the start\): build until (\d+), tests until (\d+), GPT-2 headline until "
                 r"(\d+), end-to-end runs and benchmarks until (\d+); budget (\d+)", report)
check(plan is not None, "the plan line gives every phase's deadline")
if plan:
    b, t, h, e, total = map(int, plan.groups())
    check(b < t < h < e < total == 560, f"deadlines in phase order within the budget: {plan.groups()}")
phases = re.findall(r"^== phase (\w+) done", report, re.M)
check(phases == ["build", "tests", "headline", "e2e", "bench"], f"phases in order of value: {phases}")
for g in GROUPS:
    check(re.search(rf"^PASS: tests \[{g}\]: All tests passed", report, re.M) is not None, f"device tests [{g}] pass")
check(re.search(r"^note: tests \[nccl\]: not built", report, re.M) is not None, "[nccl] noted as not built")
check(re.search(r"^PASS: gpt-2 124m on cpu: .*model FLOP utilization", report, re.M) is not None,
      "the headline measures a step and its MFU")
for variant in ("fused", "fused_recompute", "fp8", "explicit_recompute"):
    check(re.search(rf"^PASS: gpt-2 124m on cpu, {variant}: .*model FLOP utilization.*; activations [0-9.]+ [KMGT]iB",
                    report, re.M) is not None, f"the headline measures the step with {variant} attention, its MFU and activations")
check(re.search(r"^note: gpt-2 124m on cpu, fp8_emulated: the fp8 run", report, re.M) is not None,
      "the emulated FP8 variant is the fp8 run on the CPU (noted)")
for what in ("amp_ddp on cpu: done", "gpt on cpu: done", "gradient accumulation on cpu: 8 x 2 micro-batches == 16",
             "amp_ddp sample on cpu: the final checkpoint's sample is the run's final sample"):
    check(f"PASS: {what}" in report, f"end to end: {what}")
check(re.search(r"^\| 32 \| 8 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$", report, re.M) is not None and
      re.search(r"^\| 64 \| 4 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$", report, re.M) is not None,
      "the attention crossover table has both paths' step times at both lengths")
check(re.search(r"^PASS: where the GPT-2 step's time goes \(bench_gpt_step.*GEMMs [0-9.]+ ms", report, re.M) is not None and
      re.search(r"^  attention_backward +[0-9.]+ ms", report, re.M) is not None,
      "the bench phase reports where the GPT-2 step's time goes, op by op")
check(re.search(r"^PASS: sampling \(bench_sampling\): context 8: [0-9.]+ -> [0-9.]+ ms a token", report, re.M) is not None and
      re.search(r"^\| 100 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \|", report, re.M) is not None,
      "the bench phase measures sampling with the cache against the whole context")
check(re.search(r"^gpu_check: 0 failure\(s\)", report, re.M) is not None, "the summary counts no failure")
summ = open(os.path.join(out, "gpu_check_summary.txt")).read()
check(summ.startswith("== summary (final") and "gpu_check: 0 failure(s)" in summ, "the summary file is the final one")
with tarfile.open(os.path.join(out, "gpu_check_logs.tgz")) as tf:
    names = tf.getnames()
check(all(f"./test_{g}.log" in names for g in GROUPS) and "./amp_ddp_gpt2.log" in names and "./build.log" in names,
      f"the logs archive holds every command's log ({len(names)} entries)")
check(not any(n.endswith(".bin") for n in names), "the logs archive holds no input data")
check(wall < 560, f"clean dry run within its budget ({wall:.0f} s)")
check(left == [], f"the dry run leaves nothing in its TMPDIR (left: {left})")

# 2. A hanging test group: the deadlines keep the later phases.
# Near the smallest budget (240: the build until 10 s), with 20 s more for the build: a full ctest
# on 2 cores can keep make's up-to-date check of the build past 10 s.
budget = 260  # build until 30 s, tests until 60 s, headline until 160 s, all until 240 s
rc, report, out, wall, _ = dry_run(budget, "hang:gemm", until="e2e")  # the benchmarks are run 1's
check(rc == 1, f"a hanging group makes the check fail (exit {rc})")
check(re.search(r"^FAIL: tests \[gemm\] \(timed out\)", report, re.M) is not None,
      f"the hanging group times out; report head: {report[:1500]}")
check(re.search(r"^FAIL: tests \[trainer\] \(not run: its deadline passed\)", report, re.M) is not None,
      "groups after the deadline fail as not run")
check(re.search(r"^PASS: gpt-2 124m on cpu", report, re.M) is not None, "the headline still runs after a hang")
check("PASS: amp_ddp on cpu" in report, "the end-to-end runs still run after a hang")
check(wall < budget, f"the run with a hang ends within its budget ({wall:.0f} s of {budget})")
summ = open(os.path.join(out, "gpu_check_summary.txt")).read()
check("FAIL  tests [gemm] (timed out)" in summ, "the summary file names the failure")
check(re.findall(r"^== phase (\w+) done", report, re.M) == ["build", "tests", "headline", "e2e"] and
      "stopping after phase e2e (AMP_GPU_CHECK_UNTIL=e2e)" in report and "sampling (bench_sampling)" not in report,
      "AMP_GPU_CHECK_UNTIL=e2e: the run stops after the end-to-end phase, and says so")

# 3. A test binary that cannot start: FAIL, not SKIP.
rc, report, out, wall, left = dry_run(300, "nolist", until="tests")
check(rc == 1, f"a test binary that lists nothing fails the check (exit {rc})")
check(re.search(r"^FAIL: device tests: .* lists no \[\.cuda\] cases", report, re.M) is not None,
      "it is a FAIL naming the binary")
check("SKIP" not in report, "nothing is reported as skipped")
check(left == [], f"a failed dry run leaves nothing in its TMPDIR either (left: {left})")
check("gpt-2 124m" not in report and re.search(r"^gpu_check: 1 failure\(s\)", report, re.M) is not None,
      "AMP_GPU_CHECK_UNTIL=tests: no headline, and the summary counts the one failure")

# 4. A phase that does not exist.
p = subprocess.run(["bash", SCRIPT, "--dry-run"], capture_output=True, text=True,
                   env=dict(os.environ, AMP_GPU_CHECK_UNTIL="benchmarks"), timeout=60)
check(p.returncode == 2 and "AMP_GPU_CHECK_UNTIL must be build, tests, headline, e2e or bench" in p.stderr,
      f"AMP_GPU_CHECK_UNTIL=benchmarks is a usage error ({p.returncode}: {p.stderr.strip()[-200:]})")
done()
