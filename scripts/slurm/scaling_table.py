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
    if len(args) == 1 and os.path.isfile(os.path.join(args[0], "jobs.tsv")):
        with open(os.path.join(args[0], "jobs.tsv")) as f:
            for line in f:
                if line.strip():
                    n, g, job, d = line.rstrip("\n").split("\t")
                    yield n, g, job, d
    else:
        for d in args:
            yield "?", "?", "?", d


def fmt_ms(s):
    return "-" if s is None else f"{s * 1e3:.3f}"


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
        ranks = s.get("world_size", 1)
        gb = s.get("global_batch")
        sps = s.get("samples_per_second") or 0.0
        step = (gb / sps) if gb and sps else None
        rows.append(dict(n=n, g=g, job=job, ranks=ranks, gb=gb, sps=sps, step=step,
                         comm=s.get("comm_seconds_per_step"), exposed=s.get("comm_exposed_seconds_per_step"),
                         hidden=s.get("comm_hidden_share"), stopped=s.get("stopped_early", False),
                         steps=s.get("steps"), model=s.get("model"), precision=s.get("precision")))
    good = [r for r in rows if "missing" not in r and r["sps"] > 0]
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
        if base and r["sps"] > 0:
            eff = f"{(r['sps'] / r['ranks']) / (base['sps'] / base['ranks']):.2f}"
        hidden = "-" if r["hidden"] is None else f"{r['hidden']:.2f}"
        note = " (stopped early)" if r["stopped"] else ""
        print(f"| {r['n']} | {r['g']} | {r['ranks']} | {r['gb']} | {r['steps']} | {fmt_ms(r['step'])} | "
              f"{r['sps']:.0f} | {eff} | {fmt_ms(r['comm'])} | {fmt_ms(r['exposed'])} | {hidden} | "
              f"{r['job']}{note} |")
    return 0 if len(good) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
