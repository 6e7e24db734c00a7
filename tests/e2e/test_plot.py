"""scripts/plot_runs.py: two short real runs (FP16 with dynamic scaling that skips steps at the
start, FP32) plotted into one valid PNG; the skipped steps are counted; torn last lines, null
values, a single record and a run without summary or evaluation still plot; a missing folder, a
folder without metrics.jsonl and an empty metrics.jsonl are exit 2 naming the folder, and so is an
-o that names a folder; an -o without a suffix prints the FILE.png written.
Skipped (exit 0) only when matplotlib cannot be imported."""
import os
import re
import shutil
import struct
import subprocess
import sys
from e2e_util import check, done, run, skip, source, summary, tmpdir

PLOT = source("scripts", "plot_runs.py")


def plot(*argv):
    p = subprocess.run([sys.executable, PLOT] + list(argv), capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def png_info(path):
    """(is a PNG, width, height) from the signature and the IHDR chunk."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return False, 0, 0
    w, h = struct.unpack(">II", head[16:24])
    return True, w, h


rc, out, err = plot("--check")
if rc == 3:
    skip(f"matplotlib not installed ({err.strip()})")
check(rc == 0, f"plot_runs.py --check: {out.strip()} {err.strip()[-300:]}")

base = tmpdir()
cfg = source("configs", "seed_dynamic.yaml")
common = ["run.steps=60", "run.log_interval=5", "run.progress=off"]
fp16, fp32 = os.path.join(base, "seed_fp16"), os.path.join(base, "seed_fp32")
# The scale starts far too high for FP16: the first steps overflow and are skipped.
rc, _, err = run(cfg, common + [f"run.out_dir={fp16}", "precision.loss_scale.init_scale=1e9"])
check(rc == 0, f"fp16 run ({err[-300:]})")
skipped = summary(fp16)["skipped_steps"] if rc == 0 else -1
check(skipped > 0, f"the fp16 run skipped steps ({skipped})")
rc, _, err = run(cfg, common + [f"run.out_dir={fp32}", "precision.compute=fp32", "precision.loss_scale.mode=none"])
check(rc == 0, f"fp32 run ({err[-300:]})")

png = os.path.join(base, "plots", "cmp.png")   # the folder does not exist yet
rc, out, err = plot(fp16, fp32, "-o", png, "--title", "seed_dynamic: fp16 vs fp32")
check(rc == 0, f"plot of two runs: exit 0 ({err[-300:]})")
check(out.strip().splitlines()[-1:] == [png], f"prints the path written ({out.strip()[-200:]})")
ok = os.path.isfile(png)
size = os.path.getsize(png) if ok else 0
is_png, w, h = png_info(png) if ok else (False, 0, 0)
check(is_png and w >= 600 and h >= 400, f"a valid PNG, {w}x{h}")
check(size > 20000, f"non-trivial size ({size} bytes)")
check(f"{fp16}: seed_fp16 (fp16, dynamic): 12 log records" in out and f"{fp32}: seed_fp32 (fp32, none): " in out,
      "labels from the folder name and summary.json's precision and loss_scale_mode")
check(f"{skipped} skipped steps" in out and "0 skipped steps" in out,
      f"skipped steps counted from the 'skipped' counter ({skipped} and 0)")
check("warning" not in err, f"no warnings on intact runs ({err.strip()[-200:]})")

# A torn last line (a killed run): skipped with a warning, the rest plots.
torn = os.path.join(base, "torn")
os.makedirs(torn)
shutil.copy(os.path.join(fp16, "metrics.jsonl"), torn)
with open(os.path.join(torn, "metrics.jsonl"), "a") as f:
    f.write('{"step":65,"epoch":0.25,"loss":0.1')
rc, out, err = plot(torn, "-o", os.path.join(base, "torn.png"))
check(rc == 0 and os.path.isfile(os.path.join(base, "torn.png")), f"torn last line: still plots ({err[-300:]})")
check("torn last line" in err and "metrics.jsonl:" in err, f"torn last line: a warning ({err.strip()[-200:]})")
check(f"{torn}: torn: 12 log records" in out and f"{skipped} skipped steps" in out,
      f"no summary.json: labelled by the folder name ({out.strip()[:200]})")

# A single record with nulls (non-finite), no evaluation, no summary.
single = os.path.join(base, "single")
os.makedirs(single)
with open(os.path.join(single, "metrics.jsonl"), "w") as f:
    f.write('{"epoch":0.1,"grad_norm":null,"growth_tracker":0,"loss":null,"lr":0.01,'
            '"samples_per_second":1000.0,"scale":65536.0,"skipped":1,"step":1,"step_ms":1.0}\n')
rc, out, err = plot(single, fp32, "-o", os.path.join(base, "single.png"))
check(rc == 0 and png_info(os.path.join(base, "single.png"))[0],
      f"a single record with null values, next to a full run ({err[-300:]})")
check("1 skipped steps" in out, f"a skip in the first record counts ({out.strip()[:200]})")

# Errors: exit 2, naming the folder.
missing = os.path.join(base, "no_such_run")
bad_png = os.path.join(base, "bad.png")
rc, out, err = plot(fp32, missing, "-o", bad_png)
check(rc == 2 and missing in err and not os.path.exists(bad_png),
      f"missing folder: exit 2 naming it, nothing written (rc {rc}: {err.strip()[-200:]})")
nometrics = os.path.join(base, "nometrics")
os.makedirs(nometrics)
rc, out, err = plot(nometrics, "-o", bad_png)
check(rc == 2 and nometrics in err and "metrics.jsonl" in err,
      f"folder without metrics.jsonl: exit 2 naming it (rc {rc}: {err.strip()[-200:]})")
empty = os.path.join(base, "empty")
os.makedirs(empty)
open(os.path.join(empty, "metrics.jsonl"), "w").close()
rc, out, err = plot(empty, "-o", bad_png)
check(rc == 2 and empty in err, f"empty metrics.jsonl: exit 2 naming the folder (rc {rc}: {err.strip()[-200:]})")
rc, out, err = plot(fp32)
check(rc == 2 and "-o" in err, f"-o is required (rc {rc}: {err.strip()[-200:]})")
check(not os.path.exists(bad_png), "no image written on errors")
rc, out, err = plot(fp32, "-o", fp16)
check(rc == 2 and "names a folder" in err, f"-o naming a folder: exit 2 (rc {rc}: {err.strip()[-200:]})")
# No suffix: matplotlib writes FILE.png, and that is the path printed. A "skipped" counter that is
# not a finite number (an edited file) is not a skip count.
noext = os.path.join(base, "nosuffix")
inf = os.path.join(base, "inf")
os.makedirs(inf)
with open(os.path.join(fp16, "metrics.jsonl")) as f, open(os.path.join(inf, "metrics.jsonl"), "w") as g:
    text = re.sub(r'"skipped": *[0-9]+', '"skipped": Infinity', f.read())
    g.write(text)
check("Infinity" in text, "the copied run's skipped counters made infinite")
rc, out, err = plot(inf, "-o", noext)
check(rc == 0 and out.strip().splitlines()[-1] == noext + ".png" and png_info(noext + ".png")[0] and "Traceback" not in err,
      f"-o without a suffix prints the file written; an infinite skipped counter plots (rc {rc}: {out.strip()[-200:]} {err.strip()[-300:]})")

done()
