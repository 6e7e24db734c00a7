"""Hostile round five, the commands around training (each failed before its fix):
- a FIFO as the config file or as model.init_from is refused naming it (both blocked in open()
  forever, and SIGTERM did not end them);
- weights that are not finite are refused naming the tensor (init_from, eval, sample, export took
  them), and weights that are finite but overflow end `eval` and `sample` with exit 5 (eval printed
  a loss of nan and sample printed noise, both with exit 0);
- model.init_from from an amp_ddp checkpoint of a GPT trained with other heads (the same shapes) is
  refused (eval gave another model's loss);
- a safetensors file whose lm_head.weight is not the token embedding, or that holds a tensor twice
  (with and without the "transformer." prefix), is refused (the head was dropped unread);
- `export` never writes through a link planted at its temporary's name (it wrote through it);
- `sample --seed` beyond sample.seed's range is a usage error (it was clamped);
- `prepare` into a folder another process is using is refused (two runs wrote the same
  temporaries and mixed their shards);
- a NUL character in a string value or a raw NUL byte in the YAML is a config error (the first
  named a folder up to the NUL, the second was read as a line break)."""
import fcntl
import json
import os
import struct
import subprocess
import time
from e2e_util import args, check, done, run, tiny_gpt_config, tmpdir

base = tmpdir()
cfg = tiny_gpt_config(base)
binary = args().binary


def command(argv, timeout=60):
    t0 = time.time()
    p = subprocess.run([binary] + argv, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    return p.returncode, p.stdout, p.stderr, time.time() - t0


# A checkpoint and its safetensors export to start from.
rc, out, err = run(cfg, ["run.steps=2", "checkpoint.final=true", f"run.out_dir={base}/good"])
ckpt = os.path.join(base, "good", "checkpoints", "ckpt_step0000000002.bin")
check(rc == 0 and os.path.exists(ckpt), f"the tiny GPT trains 2 steps and writes its checkpoint ({rc}: {err[-200:]})")
good_st = os.path.join(base, "good.safetensors")
rc, _, err, _ = command(["export", ckpt, "--format", "safetensors", "-o", good_st])
check(rc == 0, f"export of the checkpoint ({rc}: {err[-200:]})")


def read_st(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), bytearray(b[8 + n:])


def write_st(path, header, data):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(data))


header, data = read_st(good_st)
names = [k for k in header if k != "__metadata__"]
wte = next(k for k in names if k.endswith("wte.weight"))
fc = next(k for k in names if k.endswith("h.0.mlp.c_fc.weight"))


def variant(name, edit):
    h, d = json.loads(json.dumps(header)), bytearray(data)
    edit(h, d)
    p = os.path.join(base, name)
    write_st(p, h, d)
    return p


def set_f32(h, d, key, value, first_only=False):
    a, b = h[key]["data_offsets"]
    for o in range(a, a + 4 if first_only else b, 4):
        d[o:o + 4] = struct.pack("<f", value)


# ---- FIFOs ----------------------------------------------------------------------------------------
fifo = os.path.join(base, "x.fifo")
os.mkfifo(fifo)
try:
    rc, _, err, secs = command([fifo])
    check(rc == 2 and "not a regular file (a FIFO)" in err and secs < 30, f"a FIFO as the config: exit 2 naming it ({rc}: {err.strip()[-200:]})")
except subprocess.TimeoutExpired:
    check(False, "a FIFO as the config: exit 2 naming it (it blocked for 60 s)")
for what, argv in (("model.init_from of a run", [cfg, "--set", f"model.init_from={fifo}", "--set", f"run.out_dir={base}/fifo_run"]),
                   ("model.init_from of eval", ["eval", cfg, "--set", f"model.init_from={fifo}"])):
    try:
        rc, _, err, secs = command(argv)
        check(rc == 4 and "not a regular file (a FIFO)" in err and secs < 30, f"a FIFO as {what}: exit 4 naming it ({rc}: {err.strip()[-200:]})")
    except subprocess.TimeoutExpired:
        check(False, f"a FIFO as {what}: exit 4 naming it (it blocked for 60 s)")

# ---- weights that are not finite, or that overflow ------------------------------------------------
nan_st = variant("nan.safetensors", lambda h, d: set_f32(h, d, fc, float("nan"), first_only=True))
for what, argv in (("eval", ["eval", cfg, "--set", f"model.init_from={nan_st}"]),
                   ("a run", [cfg, "--set", f"model.init_from={nan_st}", "--set", f"run.out_dir={base}/nan_run"])):
    rc, _, err, _ = command(argv)
    check(rc == 4 and "not finite" in err and "h.0.mlp.c_fc.weight" in err.replace("transformer.", ""),
          f"a NaN weight in model.init_from ({what}): exit 4 naming the tensor ({rc}: {err.strip()[-200:]})")
huge_st = variant("huge.safetensors", lambda h, d: set_f32(h, d, fc, 3e38))
rc, out, err, _ = command(["eval", cfg, "--set", f"model.init_from={huge_st}"])
check(rc == 5 and "non-finite loss" in err and huge_st in err,
      f"eval of finite weights that overflow: exit 5, not a loss of nan ({rc}: {(out + err).strip()[-200:]})")
# A checkpoint with finite weights that overflow: one AdamW step at a learning rate of 1e30.
rc, out, err = run(cfg, ["run.steps=1", "optimizer.lr=1e30", "run.max_loss_ratio=0", "run.max_loss_vs_uniform=0",
                         "checkpoint.final=true", f"run.out_dir={base}/huge"])
huge_ckpt = os.path.join(base, "huge", "checkpoints", "ckpt_step0000000001.bin")
check(rc == 0 and os.path.exists(huge_ckpt), f"one step at lr 1e30 writes its checkpoint ({rc}: {err[-200:]})")
rc, out, err, _ = command(["sample", huge_ckpt, "--tokens", "5"])
check(rc == 5 and "non-finite logits" in err, f"sample of weights that overflow: exit 5, not noise ({rc}: {(out + err).strip()[-200:]})")

# ---- an amp_ddp checkpoint of the same shapes and another function ---------------------------------
rc, out, err, _ = command(["eval", cfg, "--set", f"model.init_from={ckpt}", "--set", "model.n_head=4"])
check(rc == 4 and "model.n_head 2, this config has 4" in err, f"init_from a checkpoint with other heads: exit 4 ({rc}: {err.strip()[-200:]})")
rc, out, err, _ = command(["eval", cfg, "--set", f"model.init_from={ckpt}"])
check(rc == 0, f"init_from the checkpoint with its own model: eval runs ({rc}: {err.strip()[-200:]})")

# ---- lm_head.weight and duplicate tensors ----------------------------------------------------------
def add_head(h, d, value=None):
    a, b = h[wte]["data_offsets"]
    head = bytearray(d[a:b])
    if value is not None:
        head[0:4] = struct.pack("<f", value)
    h["lm_head.weight"] = {"dtype": h[wte]["dtype"], "shape": h[wte]["shape"], "data_offsets": [len(d), len(d) + len(head)]}
    d.extend(head)


tied = variant("tied.safetensors", lambda h, d: add_head(h, d))
rc, out, err, _ = command(["eval", cfg, "--set", f"model.init_from={tied}"])
check(rc == 0, f"an lm_head.weight equal to wte is read ({rc}: {err.strip()[-200:]})")
untied = variant("untied.safetensors", lambda h, d: add_head(h, d, 0.123))
rc, out, err, _ = command(["eval", cfg, "--set", f"model.init_from={untied}"])
check(rc == 4 and "lm_head.weight" in err and "differs from the token embedding" in err,
      f"an lm_head.weight other than wte: exit 4 ({rc}: {err.strip()[-200:]})")


def duplicate(h, d):
    a, b = h[wte]["data_offsets"]
    twin = "transformer." + wte if not wte.startswith("transformer.") else wte[len("transformer."):]
    h[twin] = {"dtype": h[wte]["dtype"], "shape": h[wte]["shape"], "data_offsets": [len(d), len(d) + (b - a)]}
    d.extend(d[a:b])


twice = variant("twice.safetensors", duplicate)
rc, out, err, _ = command(["eval", cfg, "--set", f"model.init_from={twice}"])
check(rc == 4 and "in the file twice" in err, f"a tensor in the file twice: exit 4 ({rc}: {err.strip()[-200:]})")

# ---- export through a planted link ----------------------------------------------------------------
precious = os.path.join(base, "precious.txt")
with open(precious, "w") as f:
    f.write("keep me\n")
target = os.path.join(base, "planted.st")
p = subprocess.run(["bash", "-c", f'ln -s "{precious}" "{target}.tmp.$$" && exec "{binary}" export "{ckpt}" --format llmc -o "{target}"'],
                   capture_output=True, text=True, timeout=60)
with open(precious, "rb") as f:
    kept = f.read() == b"keep me\n"
check(p.returncode == 8 and kept, f"export never writes through a link at its temporary's name ({p.returncode}: {p.stderr.strip()[-200:]})")

# ---- sample --seed ---------------------------------------------------------------------------------
for seed in ("9223372036854775808", "9000000000000001"):
    rc, out, err, _ = command(["sample", ckpt, "--tokens", "4", "--seed", seed])
    check(rc == 2 and "--seed" in err, f"sample --seed {seed}: a usage error ({rc}: {(out + err).strip()[-160:]})")
rc, out, err, _ = command(["sample", ckpt, "--tokens", "4", "--seed", "9000000000000000"])
check(rc == 0, f"sample --seed 9e15 (the range's end) samples ({rc}: {err.strip()[-160:]})")

# ---- prepare into a folder in use ------------------------------------------------------------------
shards = os.path.join(base, "shards")
os.makedirs(shards)
with open(os.path.join(shards, ".amp_ddp.lock"), "w") as held:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    held.write("pid 1 on elsewhere")
    held.flush()
    rc, out, err, _ = command(["prepare", os.path.join(base, "corpus.txt"), "-o", shards, "--tokenizer", "bytes", "-q"])
check(rc == 2 and "another run is using this folder (pid 1 on elsewhere)" in err and not any(n.endswith(".bin") for n in os.listdir(shards)),
      f"prepare into a folder in use: exit 2, nothing written ({rc}: {err.strip()[-200:]})")
rc, out, err, _ = command(["prepare", os.path.join(base, "corpus.txt"), "-o", shards, "--tokenizer", "bytes", "-q"])
check(rc == 0, f"prepare into the folder once it is free ({rc}: {err.strip()[-200:]})")

# ---- NUL characters --------------------------------------------------------------------------------
rc, out, err, _ = command([cfg, "--set", f"run.out_dir={base}/nul", "--set", 'run.name="ti\\0ny"'])
check(rc == 2 and "NUL" in err and not os.path.exists(os.path.join(base, "nul")),
      f"a NUL in --set run.name: exit 2, no folder made ({rc}: {err.strip()[-200:]})")
raw = os.path.join(base, "raw_nul.yaml")
with open(cfg, "rb") as f:
    text = f.read()
with open(raw, "wb") as f:
    f.write(text.replace(b'prompt: "the "', b'prompt: "t\x00he "'))
rc, out, err, _ = command([raw, "--set", "run.steps=1", "--set", f"run.out_dir={base}/raw"])
check(rc == 2 and "NUL byte" in err and raw in err, f"a raw NUL byte in the YAML: exit 2 naming the file ({rc}: {err.strip()[-200:]})")

done()
