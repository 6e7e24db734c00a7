"""Hostile round seven, the run folder and the reports (each check of a fix failed before it):
- a fresh run moves files named like checkpoints whose header cannot be read (another program's
  file, the last run's newest checkpoint cut short) aside with the folder's earlier run: it wrote
  its own checkpoint of that step over them, without a word;
- a file named ckpt_step<more than 18 digits>.bin is no checkpoint: it was listed as the newest,
  so rotation kept it and deleted a real one;
- a resume on data that changed at the same paths says so (it continued silently);
- a resume at the run's last step (nothing left to train) keeps final_loss in summary.json (it
  dropped it);
- `sample --prompt ""` is a usage error, as an empty sample.prompt is a config error (it sampled
  from an unannounced token);
- a GPT too large for memory because of its vocabulary names model.vocab_size (it named
  model.seq_len), and `eval` without an evaluation set names the --set that removed it (it named the
  config file's data section); a YAML merge key says merge keys are not supported (it was an
  "unknown key"), and `export -o ""` is a usage error (it was an output error)."""
import json
import os
from e2e_util import args, check, done, run, source, tiny_gpt_config, tmpdir
import subprocess

base = tmpdir()
cfg = tiny_gpt_config(base)
binary = args().binary
quick = ["sample.tokens=0", "run.eval_interval=0"]


def ckpts(out):
    d = os.path.join(out, "checkpoints")
    return sorted(n for n in os.listdir(d) if n.startswith("ckpt_step")) if os.path.isdir(d) else []


def holding(root, content):
    """The paths under root whose bytes are `content`."""
    found = []
    for d, _, files in os.walk(root):
        for n in files:
            with open(os.path.join(d, n), "rb") as f:
                if f.read() == content:
                    found.append(os.path.relpath(os.path.join(d, n), root))
    return found


# ---- files named like checkpoints that no run can read ---------------------------------------------
out = os.path.join(base, "notes")
os.makedirs(os.path.join(out, "checkpoints"))
notes = b"my precious notes\n"
with open(os.path.join(out, "checkpoints", "ckpt_step0000000010.bin"), "wb") as f:
    f.write(notes)
rc, o, e = run(cfg, quick + [f"run.out_dir={out}", "run.steps=20", "checkpoint.interval=10", "checkpoint.keep=5"])
e = o + e  # the run's log lines are on stdout
kept = holding(out, notes)
check(rc == 0 and kept and "previous" in kept[0] and "header cannot be read" in e,
      f"a fresh run moves a file named like a checkpoint aside, whole ({rc}: {kept}; {e.strip()[-200:]})")
check(ckpts(out) == ["ckpt_step0000000010.bin", "ckpt_step0000000020.bin"], f"... and writes its own ({ckpts(out)})")

out = os.path.join(base, "cut")
common = quick + [f"run.out_dir={out}", "checkpoint.interval=10", "checkpoint.keep=1"]
rc, o, e = run(cfg, common + ["run.steps=20"])
newest = os.path.join(out, "checkpoints", "ckpt_step0000000020.bin")
with open(newest, "rb") as f:
    whole = f.read()
cut = whole[:200]  # inside the JSON header: nobody's (a cut that leaves the header whole is the run's)
with open(newest, "wb") as f:
    f.write(cut)
rc, o, e = run(cfg, common + ["run.steps=30", "checkpoint.resume=auto"])
e = o + e
check(rc == 0 and "starting from step 1" in e and holding(out, cut),
      f"the last run's newest checkpoint cut short survives a fresh start in its folder ({rc}: {e.strip()[-200:]})")

# ---- a name of more than 18 digits -----------------------------------------------------------------
out = os.path.join(base, "digits")
common = quick + [f"run.out_dir={out}", "checkpoint.interval=10", "checkpoint.keep=3"]
rc, o, e = run(cfg, common + ["run.steps=30"])
with open(os.path.join(out, "checkpoints", "ckpt_step0000000010.bin"), "rb") as f:
    copy = f.read()
odd = "ckpt_step99999999999999999999.bin"
with open(os.path.join(out, "checkpoints", odd), "wb") as f:
    f.write(copy)
rc, o, e = run(cfg, common + ["run.steps=50", "checkpoint.resume=auto"])
e = o + e
check(rc == 0 and "resumed from" in e and ckpts(out) == ["ckpt_step0000000030.bin", "ckpt_step0000000040.bin",
                                                          "ckpt_step0000000050.bin", odd],
      f"rotation keeps the run's newest 3 true checkpoints and leaves the oddly named file alone ({rc}: {ckpts(out)})")
check("step -1" not in e, f"no 'step -1' in the log ({e.strip()[-160:]})")

# ---- a resume on other data ------------------------------------------------------------------------
corpus = os.path.join(base, "corpus.txt")
data = os.path.join(base, "corp2.txt")
with open(corpus) as f:
    text = f.read()
with open(data, "w") as f:
    f.write(text)
out = os.path.join(base, "data")
common = quick + [f"run.out_dir={out}", f'data.text_files=["{data}"]', "checkpoint.final=true"]
rc, o, e = run(cfg, common + ["run.steps=10"])
with open(data, "w") as f:
    f.write(text[:len(text) // 2])
rc, o, e = run(cfg, common + ["run.steps=20", "checkpoint.resume=auto"])
e = o + e
check(rc == 0 and "was written on other data" in e, f"a resume on changed data says so ({rc}: {e.strip()[-240:]})")
rc, o, e = run(cfg, common + ["run.steps=30", "checkpoint.resume=auto"])
e = o + e
check(rc == 0 and "other data" not in e, f"... and the next resume on the same data does not ({rc}: {e.strip()[-160:]})")

# ---- nothing left to train -------------------------------------------------------------------------
out = os.path.join(base, "finished")
common = quick + [f"run.out_dir={out}", "run.steps=12", "checkpoint.final=true"]
rc, o, e = run(cfg, common)
with open(os.path.join(out, "summary.json")) as f:
    before = json.load(f)
rc, o, e = run(cfg, common + ["checkpoint.resume=auto"])
e = o + e
with open(os.path.join(out, "summary.json")) as f:
    after = json.load(f)
check(rc == 0 and "nothing left to train" in e and after.get("final_loss") == before.get("final_loss") is not None,
      f"a resume with nothing left keeps final_loss ({rc}: {before.get('final_loss')} -> {after.get('final_loss')})")

# ---- sample --prompt "" ----------------------------------------------------------------------------
ck = os.path.join(out, "checkpoints", "ckpt_step0000000012.bin")
p = subprocess.run([binary, "sample", ck, "--prompt", "", "--tokens", "4"], capture_output=True, text=True, timeout=60)
check(p.returncode == 2 and "empty prompt" in p.stderr, f'sample --prompt "": a usage error ({p.returncode}: {p.stderr.strip()[-160:]})')
p = subprocess.run([binary, "sample", ck, "--prompt", "the", "--tokens", "4"], capture_output=True, text=True, timeout=60)
check(p.returncode == 0, f"sample --prompt the still samples ({p.returncode}: {p.stderr.strip()[-160:]})")

rc, o, e = run(cfg, [f"model.init_from={ck}", "data.eval_fraction=0"], command="eval")
check(rc == 2 and "--set data.eval_fraction=0: data.eval_fraction: the config has no evaluation set" in e,
      f"eval without an evaluation set names the --set that removed it ({rc}: {e.strip()[-200:]})")
rc, o, e = run(source("configs", "seed_dynamic.yaml"), [f"model.init_from={ck}", "data.synthetic.eval_samples=0"], command="eval")
check(rc == 2 and "the config has no evaluation set: give data.synthetic.eval_samples" in e,
      f"eval of synthetic data without an evaluation set: the key of this data format named ({rc}: {e.strip()[-200:]})")

# ---- smaller: a YAML merge key, export -o "" -------------------------------------------------------
with open(cfg) as f:
    merged = f.read().replace('sample: {tokens: 40, prompt: "the "}', 'sample: {<<: {tokens: 4}, prompt: "the "}')
merged_cfg = os.path.join(base, "merged.yaml")
with open(merged_cfg, "w") as f:
    f.write(merged)
rc, o, e = run(merged_cfg, [f"run.out_dir={base}/merged"])
check(rc == 2 and "sample.<<: YAML merge keys" in e, f"a merge key says merge keys are not supported ({rc}: {e.strip()[-200:]})")
p = subprocess.run([binary, "export", ck, "--format", "llmc", "-o", ""], capture_output=True, text=True, timeout=60)
check(p.returncode == 2 and "expected a file path" in p.stderr, f'export -o "": a usage error ({p.returncode}: {p.stderr.strip()[-160:]})')

# ---- the key a too-large model names ---------------------------------------------------------------
rc, o, e = run(cfg, quick + [f"run.out_dir={base}/big", "model.vocab_size=16777216"])
check(rc == 2 and "model.vocab_size: a model of" in e and "--set" in e,
      f"a vocabulary too large for memory names model.vocab_size and --set ({rc}: {e.strip()[-200:]})")
rc, o, e = run(cfg, quick + [f"run.out_dir={base}/long", "model.seq_len=4096", "model.n_head=32",
                             "model.attention=explicit", "data.eval_fraction=0"])
check(rc == 2 and "model.seq_len: a model of" in e, f"a context too long for memory still names model.seq_len ({rc}: {e.strip()[-200:]})")

done()
