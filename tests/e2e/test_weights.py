"""Weights in and out: `amp_ddp export` writes a GPT checkpoint's masters as a safetensors file in
Hugging Face's GPT-2 layout and as an llm.c model file, and `model.init_from` starts a run from
either or from an amp_ddp checkpoint: the three starts give the same losses and weights bit for bit,
and the files hold what the formats say (read back here with the standard library alone: names,
shapes, the Conv1D transposes against llm.c's orientation, llm.c's header and padded vocabulary).
A Hugging Face file with the "transformer." prefix, mask buffers and a tied LM head loads the same.
Mismatches (layers, context, the model family, a damaged file) and an existing output are clear
errors with their exit codes, nothing overwritten."""
import glob
import json
import os
import struct
import subprocess
from e2e_util import args, check, done, run, source, tiny_gpt_config, tmpdir

base = tmpdir()
cfg = tiny_gpt_config(base)
L, C, T, V = 2, 32, 16, 256


def amp(*argv):
    p = subprocess.run([args().binary] + list(argv), capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    return p.returncode, p.stdout, p.stderr


def summary_of(out):
    path = os.path.join(out, "summary.json")
    return json.load(open(path)) if os.path.exists(path) else {}


def losses(out):
    return [json.loads(line)["loss"] for line in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in line]


src = os.path.join(base, "src")
rc, o, e = run(cfg, [f"run.out_dir={src}", "checkpoint.final=true", "sample.tokens=0"])
ckpt = glob.glob(os.path.join(src, "checkpoints", "ckpt_step*.bin"))[0]
st, lc = os.path.join(base, "w.safetensors"), os.path.join(base, "w.bin")
rc1, o1, e1 = amp("export", ckpt, "--format", "safetensors", "-o", st)
rc2, o2, e2 = amp("export", ckpt, "--format", "llmc", "-o", lc)
check(rc == 0 and rc1 == 0 and rc2 == 0 and "wrote" in o1 and "llm.c model file" in o2,
      f"a trained tiny GPT exported in both formats ({rc}, {rc1}: {e1.strip()}, {rc2}: {e2.strip()})")
before = open(lc, "rb").read()
rc, o, e = amp("export", ckpt, "--format", "llmc", "-o", lc)
check(rc == 8 and "exists" in e and open(lc, "rb").read() == before, f"an existing output is not overwritten ({rc}: {e.strip()})")

# ---- the safetensors file, read with the standard library
raw = open(st, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
names = {k for k in header if k != "__metadata__"}
want = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"}
for l in range(L):
    for k in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
              "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
              "mlp.c_proj.weight", "mlp.c_proj.bias"):
        want.add(f"h.{l}.{k}")
shapes_ok = (header["wte.weight"]["shape"] == [V, C] and header["wpe.weight"]["shape"] == [T, C] and
             header["h.0.attn.c_attn.weight"]["shape"] == [C, 3 * C] and header["h.0.attn.c_attn.bias"]["shape"] == [3 * C] and
             header["h.1.mlp.c_fc.weight"]["shape"] == [C, 4 * C] and header["h.1.mlp.c_proj.weight"]["shape"] == [4 * C, C] and
             header["ln_f.weight"]["shape"] == [C] and all(header[k]["dtype"] == "F32" for k in names))
ends = sorted(tuple(header[k]["data_offsets"]) for k in names)
contiguous = ends[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ends, ends[1:])) and ends[-1][1] == len(data)
check(names == want and shapes_ok and contiguous and n % 8 == 0,
      f"safetensors: GPT-2's tensor names and [in, out] Conv1D shapes, F32, contiguous data ({sorted(names ^ want)})")


def st_tensor(name):
    b, e = header[name]["data_offsets"]
    return struct.unpack(f"<{(e - b) // 4}f", data[b:e])


# ---- the llm.c file: header, order, orientation, padding
lraw = open(lc, "rb").read()
h = struct.unpack("<256i", lraw[:1024])
vp = (V + 127) // 128 * 128
floats = struct.unpack(f"<{(len(lraw) - 1024) // 4}f", lraw[1024:])
wte_n = vp * C
qkvw0 = floats[wte_n + T * C + 2 * L * C: wte_n + T * C + 2 * L * C + 3 * C * C]  # after wte, wpe, ln1w, ln1b
c_attn = st_tensor("h.0.attn.c_attn.weight")  # [C, 3C]: c_attn[i][j] == qkv[j][i]
transposed = all(qkvw0[j * C + i] == c_attn[i * 3 * C + j] for i in range(C) for j in range(3 * C))
check(h[:8] == (20240326, 3, T, V, L, 2, C, vp) and floats[:V * C] == st_tensor("wte.weight") and
      all(x == 0.0 for x in floats[V * C:wte_n]) and transposed and floats[-C:] == st_tensor("ln_f.bias"),
      f"llm.c: header {h[:8]}, wte then zero rows to {vp}, qkv [3C, C] the transpose of c_attn, ln_f.bias last")

# ---- model.init_from: three sources, one start
common = ["run.steps=3", "sample.tokens=0", "run.eval_interval=0"]
result = {}
for name, path in (("safetensors", st), ("llmc", lc), ("checkpoint", ckpt)):
    out = os.path.join(base, f"from_{name}")
    rc, o, e = run(cfg, [f"run.out_dir={out}", f"model.init_from={path}"] + common)
    result[name] = (rc, losses(out) if rc == 0 else [], json.load(open(os.path.join(out, "summary.json")))["params_hash"] if rc == 0 else "",
                    "initial weights: " in o, summary_of(out).get("init_from"))
fresh = os.path.join(base, "fresh")
run(cfg, [f"run.out_dir={fresh}"] + common)
# The loaded weights' identity beside their path: the source run's own params_hash (its final
# masters, which the checkpoint and both exports hold bit for bit).
src_hash = summary_of(src)["params_hash"]
check(all(r[4] == {"path": p, "params_hash": src_hash} for r, p in ((result["safetensors"], st), (result["llmc"], lc),
                                                                     (result["checkpoint"], ckpt))) and
      "init_from" not in summary_of(fresh),
      f"summary.json's init_from: the path and the source run's params_hash {src_hash} ({[r[4] for r in result.values()]})")
a, b, c = result["safetensors"], result["llmc"], result["checkpoint"]
check(a[0] == b[0] == c[0] == 0 and a[1] == b[1] == c[1] and a[2] == b[2] == c[2] and a[3] and
      a[1] and a[1][0] < losses(fresh)[0] - 0.3,
      f"init_from safetensors, llm.c and the checkpoint: the same losses and params_hash, below a fresh start's "
      f"({a[:3]}, {b[:3]}, {c[:3]}, fresh {losses(fresh)})")

# ---- a fine-tune resumes without its model.init_from file (moved, deleted): the checkpoint holds
# the weights, and which weights the run started from
moved = os.path.join(base, "moved.safetensors")
open(moved, "wb").write(open(st, "rb").read())
ft_out = os.path.join(base, "ft")
ft = [f"run.out_dir={ft_out}", f"model.init_from={moved}", "run.steps=6", "sample.tokens=0", "run.eval_interval=0"]
rc1, o1, e1 = run(cfg, ft + ["checkpoint.interval=3"])
whole = summary_of(ft_out)
for p in glob.glob(os.path.join(ft_out, "checkpoints", "ckpt_step*.bin")):
    if not p.endswith("ckpt_step0000000003.bin"):
        os.remove(p)
os.remove(moved)
rc2, o2, e2 = run(cfg, ft + ["checkpoint.resume=auto"])
again = summary_of(ft_out)
check(rc1 == 0 and rc2 == 0 and "is not read: the run continues from a checkpoint" in o2 and
      again.get("params_hash") == whole.get("params_hash") and
      again.get("init_from") == whole.get("init_from") == {"path": moved, "params_hash": src_hash},
      f"a fine-tune resumed from step 3 after its init_from file was deleted ends as the whole run did, with "
      f"the same init_from record ({rc1}, {rc2}: {e2.strip()[-300:]}; {again.get('init_from')} vs {whole.get('init_from')})")

# ---- a Hugging Face style file: transformer. prefix, mask buffers, tied lm_head, F16 values
hf = {"__metadata__": {"format": "pt"}}
blob = b""
for k in sorted(names):
    vals = st_tensor(k)
    enc = struct.pack(f"<{len(vals)}e", *vals)
    hf["transformer." + k] = {"dtype": "F16", "shape": header[k]["shape"], "data_offsets": [len(blob), len(blob) + len(enc)]}
    blob += enc
T = header["wpe.weight"]["shape"][0]
for l in range(L):
    # GPT-2's buffers: the causal mask of the context (BOOL) and a scalar (F32).
    mask = bytes(1 if c <= r else 0 for r in range(T) for c in range(T))
    hf[f"transformer.h.{l}.attn.bias"] = {"dtype": "BOOL", "shape": [1, 1, T, T], "data_offsets": [len(blob), len(blob) + T * T]}
    blob += mask
    hf[f"transformer.h.{l}.attn.masked_bias"] = {"dtype": "F32", "shape": [], "data_offsets": [len(blob), len(blob) + 4]}
    blob += struct.pack("<f", -1e4)
# The tied head as its own copy of wte's bytes: the format gives each tensor bytes of its own.
lo, hi = hf["transformer.wte.weight"]["data_offsets"]
hf["lm_head.weight"] = dict(hf["transformer.wte.weight"], data_offsets=[len(blob), len(blob) + (hi - lo)])
blob += blob[lo:hi]
hjson = json.dumps(hf).encode()
hjson += b" " * (-len(hjson) % 8)
hfile = os.path.join(base, "hf.safetensors")
open(hfile, "wb").write(struct.pack("<Q", len(hjson)) + hjson + blob)
out = os.path.join(base, "from_hf")
rc, o, e = run(cfg, [f"run.out_dir={out}", f"model.init_from={hfile}"] + common)
check(rc == 0 and abs(losses(out)[0] - a[1][0]) < 2e-3,
      f"a Hugging Face style file (prefix, mask buffers, tied head, F16) starts where the F32 export does "
      f"({rc}: {losses(out)[:1] if rc == 0 else e.strip()[-300:]} vs {a[1][:1]})")

# ---- mismatches
rc, o, e = run(cfg, [f"run.out_dir={base}/x1", f"model.init_from={st}", "model.n_layer=3"] + common)
check(rc == 4 and "h.2.ln_1.weight" in e and "missing" in e, f"3 layers from a 2-layer file: the missing tensor named ({rc}: {e.strip()[-200:]})")
rc, o, e = run(cfg, [f"run.out_dir={base}/x2", f"model.init_from={st}", "model.seq_len=8"] + common)
check(rc == 4 and "wpe.weight" in e and "[16, 32]" in e and "[8, 32]" in e and "model.seq_len" in e,
      f"another context length: wpe's two shapes named ({rc}: {e.strip()[-250:]})")
rc, o, e = run(cfg, [f"run.out_dir={base}/x3", f"model.init_from={lc}", "model.seq_len=8"] + common)
check(rc == 4 and "context length is 16, this model's 8 (model.seq_len)" in e, f"llm.c: another context length ({rc}: {e.strip()[-200:]})")
rc, o, e = run(source("configs", "seed_dynamic.yaml"), [f"run.out_dir={base}/x4", f"model.init_from={st}", "run.steps=2"])
check(rc == 2 and "this config builds an mlp" in e, f"GPT weights into an MLP: a config error ({rc}: {e.strip()[-200:]})")
cut = os.path.join(base, "cut.safetensors")
open(cut, "wb").write(raw[:len(raw) // 2])
rc, o, e = run(cfg, [f"run.out_dir={base}/x5", f"model.init_from={cut}"] + common)
check(rc == 4 and "data_offsets" in e, f"a truncated safetensors file ({rc}: {e.strip()[-200:]})")
junk = os.path.join(base, "junk.bin")
open(junk, "wb").write(b"not weights at all, not a checkpoint either")
rc, o, e = run(cfg, [f"run.out_dir={base}/x6", f"model.init_from={junk}"] + common)
check(rc == 4 and "model.init_from" in e and junk in e, f"a file of no known format ({rc}: {e.strip()[-200:]})")
rc, o, e = amp("export", ckpt, "--format", "onnx", "-o", os.path.join(base, "w.onnx"))
check(rc == 2 and "usage error" in e, f"an unknown export format: a usage error ({rc}: {e.strip()[-200:]})")
for target, want in ((os.path.join(base, "no_dir", "w.bin"), f"its folder {os.path.join(base, 'no_dir')} does not exist"),
                     (os.path.join(base, "new_dir") + "/", "names a folder; give a file name")):
    rc, o, e = amp("export", ckpt, "--format", "llmc", "-o", target)
    check(rc == 8 and want in e and ".tmp" not in e, f"export -o {target!r}: the folder named, no temporary ({rc}: {e.strip()[-200:]})")

# ---- headers a JSON reader would take with a shrug: each refused, naming what is wrong
bias = next(k for k in names if len(header[k]["shape"]) == 1)
body = raw[8 + struct.unpack("<Q", raw[:8])[0]:]
for what, text, want in (
        ("a key twice", json.dumps(header)[:-1] + ", " + json.dumps(bias) + ": " + json.dumps(header[bias]) + "}",
         f'names "{bias}" twice in one object'),
        ("a shape that is no list", json.dumps(dict(header, **{bias: dict(header[bias], shape=header[bias]["shape"][0])})),
         f'tensor "{bias}": its shape is not a list of sizes'),
        ("NUL padding", json.dumps(header) + "\0\0", "holds a NUL byte"),
        ("the mask buffer of a layer the model lacks",
         json.dumps(dict(header, **{f"h.{L}.attn.bias": dict(header[bias], data_offsets=[0, 0], shape=[0])})),
         f'tensor "h.{L}.attn.bias" is the causal-mask buffer of a layer this GPT does not have'),
        ("a mask buffer of another context", json.dumps(dict(header, **{"h.0.attn.bias": dict(header[bias], data_offsets=[0, 0],
                                                                                         shape=[1, 1, 2, 2])})),
         f'tensor "h.0.attn.bias" (a causal-mask buffer) has shape [1, 1, 2, 2]; this model\'s is [1, 1, {T}, {T}]'),
        ("a mask buffer of no number type", json.dumps(dict(header, **{"h.0.attn.masked_bias": dict(header[bias], dtype="STR",
                                                                                                data_offsets=[0, 0], shape=[])})),
         'tensor "h.0.attn.masked_bias" (a causal-mask buffer) is STR'),
        ("a name with a terminal escape", json.dumps({("\x1b[2J" if k == bias else k): v for k, v in header.items()}),
         'tensor "\\x1b[2J" is not a tensor of this GPT')):
    bad = os.path.join(base, "bad.safetensors")
    hb = text.encode()
    open(bad, "wb").write(struct.pack("<Q", len(hb)) + hb + body)
    rc, o, e = run(cfg, [f"run.out_dir={base}/x7", f"model.init_from={bad}"] + common)
    check(rc == 4 and want in e and "\x1b" not in e, f"safetensors with {what}: refused ({rc}: {e.strip()[-250:]!r})")
done()
