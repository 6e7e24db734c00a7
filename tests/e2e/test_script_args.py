"""The user-facing scripts' arguments: help and bad arguments end with a usage message and a
non-zero exit before any set-up, submission or deletion runs, and a table never shows a value that
was not measured as a number.
  - run_main.sh --help: its usage and, where amp_ddp is built, amp_ddp's options; exit 0 and no
    set-up (it runs from a tree without scripts/setup.sh, which any set-up would fail on);
  - gpt2_walkthrough.sh --help: usage, exit 0, nothing set up or removed; an unknown argument: exit 2;
  - plan_largest_gpt.sh: --help; a budget, rank count or context that is not a positive number:
    exit 2 naming it; amp_ddp's own refusal (a context beyond model.seq_len's range) passed through;
  - scaling_study.sh: --help prints its documentation, an unknown option or a missing config is
    exit 2, and no study folder is made;
  - scaling_table.py: a run that stopped before measuring shows "-" (not 0 samples/s, not 1 rank);
    a jobs.tsv line of another shape and a missing folder are errors naming them."""
import json
import os
import shutil
import subprocess
from e2e_util import args, check, done, source, tmpdir

BUILD = os.path.dirname(os.path.abspath(args().binary))
base = tmpdir()


def sh(*argv, env=None):
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, cwd=base,
                       env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout, p.stderr


# run_main.sh copied into trees of its own without setup.sh, one with build/amp_ddp (this build's)
# and one without it.
for built in (True, False):
    tree = os.path.join(base, "main_built" if built else "main_bare")
    os.makedirs(os.path.join(tree, "scripts"))
    shutil.copy(source("scripts", "run_main.sh"), os.path.join(tree, "scripts"))
    if built:
        os.makedirs(os.path.join(tree, "build"))
        os.symlink(os.path.abspath(args().binary), os.path.join(tree, "build", "amp_ddp"))
    rc, out, err = sh("bash", os.path.join(tree, "scripts", "run_main.sh"), "--help")
    want = "Usage: amp_ddp" if built else "once this script (or scripts/setup.sh) has built it"
    check(rc == 0 and out.startswith("The main job: set up what it runs") and want in out and "setup" not in err,
          f"run_main.sh --help ({'built' if built else 'not built'}): usage, exit 0, no set-up ({rc}: {out[-200:]} {err[-200:]})")

walk = source("scripts", "gpt2_walkthrough.sh")
rc, out, err = sh("bash", walk, "--help")
check(rc == 0 and out.startswith("usage: scripts/gpt2_walkthrough.sh") and "setup" not in err,
      f"gpt2_walkthrough.sh --help: usage, exit 0, no set-up ({rc}: {out[-200:]} {err[-200:]})")
rc, out, err = sh("bash", walk, "--torh")
check(rc == 2 and "unknown argument '--torh'" in err, f"gpt2_walkthrough.sh --torh: exit 2 ({rc}: {err[-200:]})")

plan = source("scripts", "plan_largest_gpt.sh")
env = {"AMP_BUILD": BUILD}
rc, out, err = sh("bash", plan, "--help", env=env)
check(rc == 0 and out.startswith("usage:"), f"plan_largest_gpt.sh --help ({rc}: {out[-200:]})")
for argv, want in ((["abc"], "budget 'abc'"), (["-5"], "budget '-5'"), (["nan"], "budget 'nan'"), (["0"], "budget '0'"),
                   (["80", "2.5"], "ranks '2.5'"), (["80", "0"], "ranks '0'"), (["80", "8", "x"], "context 'x'"),
                   (["1", "2", "3", "4"], "at most 3 arguments")):
    rc, out, err = sh("bash", plan, *argv, env=env)
    check(rc == 2 and want in err and "Traceback" not in err, f"plan_largest_gpt.sh {' '.join(argv)}: exit 2 naming it ({rc}: {err[-200:]})")
rc, out, err = sh("bash", plan, "80", "8", "70000", env=env)
check(rc != 0 and "model.seq_len" in err and "amp_ddp --dry-run refused" in err and "Traceback" not in err,
      f"plan_largest_gpt.sh with a context amp_ddp refuses: its message passed through ({rc}: {err[-300:]})")

study = source("scripts", "slurm", "scaling_study.sh")
rc, out, err = sh("bash", study, "--help")
check(rc == 0 and "Weak-scaling study on SLURM" in out and "AMP_STUDY_NODES" in out, f"scaling_study.sh --help ({rc}: {out[:200]})")
for argv, want in ((["--bogus"], "unknown option '--bogus'"), (["no_such.yaml"], "config 'no_such.yaml': no such file")):
    rc, out, err = sh("bash", study, *argv)
    check(rc == 2 and want in err, f"scaling_study.sh {argv[0]}: exit 2 ({rc}: {err[-200:]})")
check(not os.path.exists(os.path.join(base, "runs")), "no study folder made by refused calls")

table = source("scripts", "slurm", "scaling_table.py")
measured, stopped = os.path.join(base, "r1"), os.path.join(base, "r2")
for d, s in ((measured, {"world_size": 2, "global_batch": 16, "samples_per_second": 100.0, "steps": 5}),
             (stopped, {"steps": 0, "stopped_early": True})):
    os.makedirs(d)
    json.dump(s, open(os.path.join(d, "summary.json"), "w"))
rc, out, err = sh("python3", table, measured, stopped)
rows = [l for l in out.splitlines() if l.startswith("| ?")]
check(rc == 1 and len(rows) == 2 and rows[0].split("|")[3:8] == [" 2 ", " 16 ", " 5 ", " 160.000 ", " 100 "] and
      rows[1].split("|")[3:9] == [" - ", " - ", " 0 ", " - ", " - ", " - "],
      f"scaling_table.py: the stopped run's unmeasured ranks, batch, step time, samples/s and efficiency are '-' ({rc}: {rows})")
os.makedirs(os.path.join(base, "st"))
open(os.path.join(base, "st", "jobs.tsv"), "w").write("1\t2\tjob1\n")
rc, out, err = sh("python3", table, os.path.join(base, "st"))
check(rc != 0 and "jobs.tsv:1: 3 tab-separated cells; 4 expected" in err and "Traceback" not in err,
      f"scaling_table.py: a short jobs.tsv line named ({rc}: {err[-200:]})")
rc, out, err = sh("python3", table, os.path.join(base, "nope"))
check(rc != 0 and "nope: no such folder" in err, f"scaling_table.py: a missing folder named ({rc}: {err[-200:]})")
done()
