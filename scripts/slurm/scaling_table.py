#!/usr/bin/env python3
"""Markdown table of a scaling study (scripts/slurm/scaling_study.sh) from its runs' summary.json.

Usage: scaling_table.py STUDY_DIR        (reads STUDY_DIR/jobs.tsv: nodes, tasks/node, job, run dir)
       scaling_table.py RUN_DIR [...]    (any amp_ddp output folders; nodes shown as "?")

Step time = global batch / samples per second (the training loop only; a GPT's sample is one
window of seq_len tokens). Efficiency is weak-scaling
efficiency against the run with the fewest ranks: (samples/s per rank) / (the same of that run).
"""
import json
import os
import sys


def rows_from(args):
    for d in args:
        if not os.path.isdir(d):
            sys.exit(f"scaling_table.py: {d}: no such folder (a study folder with jobs.tsv, or run folders)")
    if len(args) == 1 and os.path.isfile(os.path.join(args[0], "jobs.tsv")):
        path = os.path.join(args[0], "jobs.tsv")
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    cells = line.rstrip("\n").split("\t")
                    if len(cells) != 4:
                        sys.exit(f"scaling_table.py: {path}:{number}: {len(cells)} tab-separated cells; "
                                 "4 expected (nodes, tasks per node, job, run folder)")
                    yield tuple(cells)
    else:
        for d in args:
            yield "?", "?", "?", d


def fmt_ms(s):
    return "-" if s is None else f"{s * 1e3:.3f}"


def cell(v):
    return "-" if v is None else v


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    rows = []
    for n, g, job, d in rows_from(argv):
        path = os.path.join(d, "summary.json")
        try:
            with open(path) as f:
                s = json.load(f)
        except (OSError, ValueError) as e:
            rows.append(dict(n=n, g=g, job=job, missing=f"no summary ({e.__class__.__name__})"))
            continue
        # A value the run did not measure (stopped in set-up, say) is absent, shown as "-", never 0.
        ranks = s.get("world_size")
        gb = s.get("global_batch")
        sps = s.get("samples_per_second")
        step = (gb / sps) if gb and sps else None
        rows.append(dict(n=n, g=g, job=job, ranks=ranks, gb=gb, sps=sps, step=step,
                         comm=s.get("comm_seconds_per_step"), exposed=s.get("comm_exposed_seconds_per_step"),
                         hidden=s.get("comm_hidden_share"), stopped=s.get("stopped_early", False),
                         steps=s.get("steps"), model=s.get("model"), precision=s.get("precision")))
    good = [r for r in rows if "missing" not in r and r["sps"] and r["ranks"]]
    base = min(good, key=lambda r: r["ranks"]) if good else None
    models = sorted({f"{r['model']}, {r['precision']}" for r in good if r.get("model")})
    if models:
        print("model: " + "; ".join(models) + "\n")
    print("| nodes | ranks/node | ranks | global batch | steps | step time (ms) | samples/s | efficiency "
          "| comm/step (ms) | exposed comm/step (ms) | hidden share | job |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        if "missing" in r:
            print(f"| {r['n']} | {r['g']} | - | - | - | - | - | - | - | - | - | {r['job']}: {r['missing']} |")
            continue
        eff = "-"
        if base and r in good:
            eff = f"{(r['sps'] / r['ranks']) / (base['sps'] / base['ranks']):.2f}"
        hidden = "-" if r["hidden"] is None else f"{r['hidden']:.2f}"
        note = " (stopped early)" if r["stopped"] else ""
        sps = "-" if r["sps"] is None else f"{r['sps']:.0f}"
        print(f"| {r['n']} | {r['g']} | {cell(r['ranks'])} | {cell(r['gb'])} | {cell(r['steps'])} | {fmt_ms(r['step'])} | "
              f"{sps} | {eff} | {fmt_ms(r['comm'])} | {fmt_ms(r['exposed'])} | {hidden} | "
              f"{r['job']}{note} |")
    return 0 if len(good) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
