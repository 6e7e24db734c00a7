"""Host memory of set-up, checkpoints and resume on 2 ranks: no rank ever holds the whole model.

A GPT of about 25M parameters (AdamW: a checkpoint of 12 bytes a parameter, 300 MB) trains 2 steps
and saves, then resumes and saves again, with zero 0 (replicated) and zero 1 (sharded). Each run's
summary.json reports rank 0's peak resident memory and the largest of the other ranks'. What a rank
holds beyond its counted training state and activations is compared with the same excess of a tiny
GPT's run (the program, MPI, the data): every rank may exceed it by the pieces the weights travel
in (64 MiB each: 3 of them, 192 MiB, counted generously), rank 0 included: it writes the file as
the pieces arrive and reads it back a piece at a time. Before the weights were streamed, rank 1
held a whole-model copy or more at every phase (16-24 bytes a parameter at save and resume,
400-600 MB here, rank 0 about 35); before the file was, rank 0 held the checkpoint's sections
(12 bytes a parameter) at every save and resume.
"""
import os
from e2e_util import check, done, run, source, summary, tmpdir

base = tmpdir()
gpt = source("configs", "gpt_fortunes_fp16.yaml")
common = ["run.eval_interval=0", "sample.tokens=0", "data.eval_fraction=0", "data.batch_size=1", "run.progress=off",
          "precision.compute=bf16", "checkpoint.final=true", "model.seq_len=64"]
PIECE = 64 << 20
MB = 1e6


def excess(s):
    """(rank 0, other ranks): peak resident bytes beyond the counted training state and activations."""
    held = s["memory_per_rank"]["training_state"] + s["memory_per_rank"]["activations"]
    return s["peak_resident_bytes_rank0"] - held, s["peak_resident_bytes_other_ranks"] - held


def train(tag, sets, steps, resume=False):
    out = os.path.join(base, tag)
    rc, so, err = run(gpt, common + sets + [f"run.out_dir={out}", f"run.steps={steps}"] +
                      (["checkpoint.resume=auto"] if resume else []), np=2)
    check(rc == 0 and (not resume or "resumed from" in so), f"{tag}: exit 0 ({err[-300:]})")
    s = summary(out)
    check("peak_resident_bytes_other_ranks" in s and "peak_resident_bytes_rank0" in s,
          f"{tag}: summary.json reports both peaks")
    return s


tiny = train("tiny", ["model.n_layer=1", "model.n_embd=64", "model.n_head=4"], 2)
base0, base1 = excess(tiny)
print(f"tiny GPT ({tiny['params']} parameters): beyond its state and activations, rank 0 {base0 / MB:.0f} MB, "
      f"rank 1 {base1 / MB:.0f} MB")
big = ["model.n_layer=8", "model.n_embd=512", "model.n_head=8"]
for zero in (0, 1):
    for phase, resume, steps in (("start and save", False, 2), ("resume and save", True, 3)):
        s = train(f"z{zero}", big + [f"distributed.zero={zero}"], steps, resume)
        p = s["params"]
        file_bytes = 12 * p
        e0, e1 = excess(s)
        print(f"zero {zero}, {phase} ({p} parameters, checkpoint {file_bytes / MB:.0f} MB): peak rank 0 "
              f"{s['peak_resident_bytes_rank0'] / MB:.0f} MB, rank 1 {s['peak_resident_bytes_other_ranks'] / MB:.0f} MB; "
              f"beyond state and activations and the tiny run's: rank 0 {(e0 - base0) / MB:.0f} MB, "
              f"rank 1 {(e1 - base1) / MB:.0f} MB")
        check(p > 20e6, f"the model is large against the pieces ({p} parameters)")
        check(e1 - base1 < 3 * PIECE,
              f"zero {zero}, {phase}: rank 1 holds no whole-model copy ({(e1 - base1) / MB:.0f} MB beyond its state, "
              f"under {3 * PIECE / MB:.0f}; a copy of the masters alone is {4 * p / MB:.0f})")
        check(e0 - base0 < 3 * PIECE,
              f"zero {zero}, {phase}: rank 0 holds no whole-model copy either ({(e0 - base0) / MB:.0f} MB beyond its "
              f"state, under {3 * PIECE / MB:.0f}; the checkpoint's sections are {file_bytes / MB:.0f})")
done()
