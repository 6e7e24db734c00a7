#!/usr/bin/env python3
"""Plots one or more amp_ddp runs into one PNG.

    scripts/plot_runs.py RUN_DIR [RUN_DIR ...] -o FILE.png [--title TEXT]

Each RUN_DIR is a run's out_dir (default runs/<run.name>/) holding metrics.jsonl and, for a
finished run, summary.json. Panels, every run overlaid in its own color:
  - training loss vs step (evaluations as markers),
  - eval accuracy vs step (only when some run has it),
  - loss scale vs step (log axis), skipped steps marked with x and counted in the legend,
  - gradient norm vs step (log axis; skipped steps have none),
  - throughput (samples/s) vs step,
  - with precision.compute fp8 and precision.telemetry_interval > 0 (first such run): each FP8
    tensor's amax x scale / the format's largest value (how much of E4M3's or E5M2's range the
    next step's cast of the newest amax uses; 1: at the edge, saturating beyond), colored by role.

A skipped step is where metrics.jsonl's "skipped" counter grows between consecutive log records;
the mark is at the log record's step (with log_interval > 1 the exact step is between the two).
Non-finite numbers (written as null) leave gaps. An unreadable line (e.g. the torn last line of a
killed run) is skipped with a warning. A missing folder, or a missing or empty metrics.jsonl, is
an error naming the folder (exit 2). Needs matplotlib (Debian: python3-matplotlib; when the python3
running this lacks it, the script re-runs itself with /usr/bin/python3; exit 3 when none has it);
draws with the Agg backend, no display needed. Prints the path written. --check only tests that
matplotlib can be imported.
"""
import argparse
import json
import math
import os
import sys


class UsageError(Exception):
    pass


def warn(msg):
    print(f"plot_runs: warning: {msg}", file=sys.stderr)


def num(v):
    """A finite float, or NaN for null / missing / non-finite / non-numeric."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    v = float(v)
    return v if math.isfinite(v) else math.nan


class Run:
    def __init__(self, folder):
        self.folder = folder
        self.name = os.path.basename(os.path.normpath(os.path.abspath(folder)))
        self.summary = {}
        self.logs = []    # log-step records
        self.evals = []   # evaluation records
        self.telemetry = 0
        self.fp8 = []     # (step, {tensor: {"amax", "scale"}}) of telemetry records
        self.skips = []   # (step, scale, how many skipped since the previous log record)

    @property
    def skipped(self):
        return sum(n for _, _, n in self.skips)

    def label(self, name=None):
        name = name or self.name
        prec, mode = self.summary.get("precision"), self.summary.get("loss_scale_mode")
        parts = [str(p) for p in (prec, mode) if p]
        return f"{name} ({', '.join(parts)})" if parts else name


def load_run(folder):
    if not os.path.isdir(folder):
        raise UsageError(f"{folder}: no such run folder")
    path = os.path.join(folder, "metrics.jsonl")
    if not os.path.isfile(path):
        raise UsageError(f"{folder}: no metrics.jsonl in this run folder (did the run start?)")
    run = Run(folder)
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    last = max((i for i, l in enumerate(lines) if l.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            where = "torn last line" if i == last else "unreadable line"
            warn(f"{path}:{i + 1}: {where} skipped ({e})")
            continue
        if "telemetry" in rec:
            run.telemetry += 1
            if isinstance(rec.get("fp8"), dict):
                run.fp8.append((num(rec.get("step")), rec["fp8"]))
        elif "eval_loss" in rec or "eval_accuracy" in rec:
            run.evals.append(rec)
        elif "loss" in rec or "skipped" in rec:
            run.logs.append(rec)
    if not run.logs and not run.evals:
        raise UsageError(f"{folder}: metrics.jsonl has no log or evaluation records (empty run?)")
    run.logs.sort(key=lambda r: num(r.get("step")))
    run.evals.sort(key=lambda r: num(r.get("step")))
    prev = 0
    for r in run.logs:
        s = r.get("skipped")
        if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s):
            if s > prev:
                run.skips.append((num(r.get("step")), num(r.get("scale")), int(s - prev)))
            prev = s
    spath = os.path.join(folder, "summary.json")
    if os.path.isfile(spath):
        try:
            with open(spath, encoding="utf-8") as f:
                s = json.load(f)
            run.summary = s if isinstance(s, dict) else {}
        except ValueError as e:
            warn(f"{spath}: unreadable, labelling the run by its folder name ({e})")
    return run


def series(records, key, positive=False):
    xs, ys = [], []
    for r in records:
        x, y = num(r.get("step")), num(r.get(key))
        if math.isnan(x):
            continue
        if positive and not (y > 0):
            y = math.nan   # a log axis cannot show it: leave a gap
        xs.append(x)
        ys.append(y)
    return xs, ys


def has_values(ys):
    return any(not math.isnan(y) for y in ys)


def line_style(xs):
    # Few points: draw markers too, so that a single record is still visible.
    return {"marker": "o", "markersize": 3} if len(xs) <= 20 else {}


DEBIAN_PYTHON = "/usr/bin/python3"
MISSING = 3   # exit code: matplotlib cannot be imported


def import_matplotlib():
    """Imports matplotlib with the Agg backend; returns None, or why it cannot. When this
    interpreter lacks it but Debian's /usr/bin/python3 (where python3-matplotlib installs) is
    another interpreter (a pyenv, venv or conda python3 first on PATH), re-runs this script with
    that one, before anything is read or printed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
        return None
    except ImportError as e:
        err = e
    try:
        other = os.path.isfile(DEBIAN_PYTHON) and not os.path.samefile(sys.executable, DEBIAN_PYTHON)
    except OSError:
        other = False
    if other and not os.environ.get("AMP_PLOT_REEXEC"):
        os.environ["AMP_PLOT_REEXEC"] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    return (f"matplotlib not available to {sys.executable} ({err}); "
            "install it with: apt-get install python3-matplotlib")


def plot(runs, out, title):
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    names = [r.name for r in runs]
    labels = [r.label(r.folder if names.count(r.name) > 1 else None) for r in runs]
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    color = [colors[i % len(colors)] for i in range(len(runs))]

    def acc_series(r):
        xs, ys = series(r.evals, "eval_accuracy")
        # Accuracy in percent when written as a fraction.
        if has_values(ys) and max(y for y in ys if not math.isnan(y)) <= 1.0:
            ys = [100.0 * y for y in ys]
        return xs, ys

    any_acc = any(has_values(acc_series(r)[1]) for r in runs)
    fp8_run = next((r for r in runs if r.fp8), None)
    panels = ["loss"] + (["acc"] if any_acc else []) + ["scale", "grad", "tput"] + (["fp8"] if fp8_run else [])
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.1 * rows + 0.9), sharex=True, squeeze=False)
    flat = list(axes.flat)
    ax = dict(zip(panels, flat))
    for extra in flat[len(panels):]:
        extra.axis("off")

    for i, r in enumerate(runs):
        c = color[i]
        xs, ys = series(r.logs, "loss")
        if xs:
            ax["loss"].plot(xs, ys, color=c, lw=1.2, **line_style(xs))
        xs, ys = series(r.evals, "eval_loss")
        if has_values(ys):
            ax["loss"].plot(xs, ys, color=c, ls="none", marker="o", markersize=6,
                            markeredgecolor="black", markeredgewidth=0.6)
        if any_acc:
            xs, ys = acc_series(r)
            if has_values(ys):
                ax["acc"].plot(xs, ys, color=c, lw=1.2, marker="o", markersize=4)
        xs, ys = series(r.logs, "scale", positive=True)
        if has_values(ys):
            ax["scale"].plot(xs, ys, color=c, lw=1.2, **line_style(xs))
        sk = [(x, y, n) for x, y, n in r.skips if not math.isnan(x) and y > 0]
        if sk:
            ax["scale"].plot([x for x, _, _ in sk], [y for _, y, _ in sk], ls="none", marker="x",
                             color=c, markersize=7, markeredgewidth=1.8)
            if len(sk) <= 40:   # how many steps each mark stands for, when it is more than one
                for x, y, n in sk:
                    if n > 1:
                        ax["scale"].annotate(str(n), (x, y), xytext=(4, 4), textcoords="offset points",
                                             color=c, fontsize=7)
        xs, ys = series(r.logs, "grad_norm", positive=True)
        if has_values(ys):
            ax["grad"].plot(xs, ys, color=c, lw=1.0, **line_style(xs))
        xs, ys = series(r.logs, "samples_per_second", positive=True)
        if has_values(ys):
            ax["tput"].plot(xs, ys, color=c, lw=1.0, **line_style(xs))

    if fp8_run:
        fmax = {"grad_output": 57344.0}  # E5M2; inputs and weights are E4M3 (448)
        role_color = {"input": "C0", "weight": "C2", "grad_output": "C3"}
        names = sorted({n for _, t in fp8_run.fp8 for n in t})
        for n in names:
            role = n.rsplit(".", 1)[-1]
            xs, ys = [], []
            for step, t in fp8_run.fp8:
                e = t.get(n, {})
                a, sc = num(e.get("amax")), num(e.get("scale"))
                xs.append(step)
                ys.append(a * sc / fmax.get(role, 448.0) if a > 0 and sc > 0 else math.nan)
            ax["fp8"].plot(xs, ys, color=role_color.get(role, "C7"), lw=0.7, alpha=0.6)
        ax["fp8"].set_title(f"fp8: amax x scale / format max ({fp8_run.name}; input, weight, grad_output)")
        ax["fp8"].set_ylabel("share of range")
        ax["fp8"].legend(handles=[Line2D([], [], color=c, lw=2, label=k) for k, c in role_color.items()],
                         fontsize=8, loc="best")
        if ax["fp8"].has_data():
            ax["fp8"].set_yscale("log")
    ax["loss"].set_title("loss (line: training, dots: evaluation)")
    ax["loss"].set_ylabel("loss")
    if any_acc:
        ax["acc"].set_title("evaluation accuracy")
        ax["acc"].set_ylabel("accuracy (%)")
    total = sum(r.skipped for r in runs)
    ax["scale"].set_title(f"loss scale (x: skipped steps, {total} in all)")
    ax["scale"].set_ylabel("scale")
    ax["scale"].legend(handles=[Line2D([], [], color=color[i], ls="none", marker="x", markersize=7,
                                       markeredgewidth=1.8, label=f"{r.name}: {r.skipped} skipped")
                                for i, r in enumerate(runs)],
                       fontsize=8, loc="best")
    ax["grad"].set_title("gradient norm at the logged step (unscaled)")
    ax["grad"].set_ylabel("grad norm")
    ax["tput"].set_title("throughput")
    ax["tput"].set_ylabel("samples/s")
    for k in ("scale", "grad"):
        if ax[k].has_data():
            ax[k].set_yscale("log")
    for a in flat[:len(panels)]:
        a.grid(True, alpha=0.3)
        a.tick_params(labelbottom=True)
        a.set_xlabel("step")
    for a in (ax["tput"],):
        a.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))

    handles = [Line2D([], [], color=color[i], lw=2,
                      label=f"{labels[i]}, {r.skipped} skipped" if r.skipped else labels[i])
               for i, r in enumerate(runs)]
    fig.legend(handles=handles, loc="upper center", ncol=min(len(runs), 3), fontsize=9,
               frameon=False, bbox_to_anchor=(0.5, 1.0 - 0.35 / fig.get_figheight()))
    if title is None:
        title = labels[0] if len(runs) == 1 else f"{len(runs)} runs"
    fig.suptitle(title, y=1.0 - 0.08 / fig.get_figheight(), fontsize=12)
    nleg = (len(runs) + 2) // 3
    fig.tight_layout(rect=(0, 0, 1, 1.0 - (0.35 + 0.22 * nleg) / fig.get_figheight()))

    parent = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(parent, exist_ok=True)
        fig.savefig(out, dpi=100)
    except (OSError, ValueError) as e:
        print(f"plot_runs: error: cannot write {out}: {e}", file=sys.stderr)
        return 1
    finally:
        plt.close(fig)
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Plot amp_ddp runs (metrics.jsonl + summary.json) into one PNG: loss, eval "
                    "accuracy, loss scale with skipped steps, gradient norm, throughput.")
    p.add_argument("runs", nargs="*", metavar="RUN_DIR", help="a run's out_dir (runs/<run.name>)")
    p.add_argument("-o", "--output", metavar="FILE.png", help="the image to write (required)")
    p.add_argument("--title", help="figure title (default: the run's label, or 'N runs')")
    p.add_argument("--check", action="store_true",
                   help="only check that matplotlib can be imported (exit 0, or 3 when it cannot)")
    a = p.parse_args(argv)
    missing = import_matplotlib()
    if a.check:
        if missing:
            print(f"plot_runs: {missing}", file=sys.stderr)
            return MISSING
        import matplotlib
        print(f"matplotlib {matplotlib.__version__} ({sys.executable})")
        return 0
    if not a.runs:
        p.error("at least one RUN_DIR is required")
    if not a.output:
        p.error("the following arguments are required: -o/--output")
    out = a.output
    if os.path.isdir(out):
        print(f"plot_runs: error: -o {out}: names a folder; give the image's file name (FILE.png)", file=sys.stderr)
        return 2
    if not os.path.splitext(out)[1]:
        out += ".png"  # what matplotlib would write: the path printed is the file written
    try:
        runs = [load_run(d) for d in a.runs]
    except UsageError as e:
        print(f"plot_runs: error: {e}", file=sys.stderr)
        return 2
    if missing:
        print(f"plot_runs: error: {missing}", file=sys.stderr)
        return MISSING
    for r in runs:
        last = r.logs[-1] if r.logs else {}
        print(f"{r.folder}: {r.label()}: {len(r.logs)} log records (last step {last.get('step', '-')}), "
              f"{len(r.evals)} evaluations, {r.skipped} skipped steps")
    rc = plot(runs, out, a.title)
    if rc == 0:
        print(out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
