"""Hostile round six, what round five reported and left (each check of a fix failed before it):
- a run or `prepare` refused after it locked its folder leaves the folders it made, and the lock
  file it made, as it found them (the folder stayed behind holding .amp_ddp.lock), also a folder
  of another run's files (its lock file stayed there);
- an option that takes an integer says so when given text (`--threads abc` said "not in range");
- `prepare --doc-separator` with a line break in it is refused (it could never match a line, so
  every file was one document);
- a JSON error in a checkpoint's header (or a safetensors file's, or the GPT-2 vocabulary's) shows
  the bytes it quotes that are not UTF-8 escaped (they were written to the terminal as they were);
- a safetensors file whose data bytes are not exactly the tensors' (bytes after the last tensor, a
  hole, two tensors on the same bytes) is refused, as the format requires (they were read)."""
import json
import os
import struct
import subprocess
from e2e_util import args, check, done, run, tiny_gpt_config, tmpdir

base = tmpdir()
cfg = tiny_gpt_config(base)
binary = args().binary
corpus = os.path.join(base, "corpus.txt")


def command(argv, timeout=60):
    """amp_ddp's exit code, stdout and stderr (bytes: a message must not depend on a decoder)."""
    p = subprocess.run([binary] + argv, capture_output=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return p.returncode, p.stdout, p.stderr


def tail(b):
    return b.decode("utf-8", "backslashreplace").strip()[-220:]


rc, out, err = run(cfg, ["run.steps=2", "checkpoint.final=true", f"run.out_dir={base}/good"])
ckpt = os.path.join(base, "good", "checkpoints", "ckpt_step0000000002.bin")
check(rc == 0 and os.path.exists(ckpt), f"the tiny GPT trains 2 steps and writes its checkpoint ({rc}: {err[-200:]})")

# ---- refused after the lock: the folders are left as they were -----------------------------------
fresh = os.path.join(base, "fresh")
rc, out, err = run(cfg, [f"run.out_dir={fresh}/deep/out", f"checkpoint.resume={base}/no_such_checkpoint.bin"])
check(rc != 0 and "no_such_checkpoint" in err, f"a resume from a missing checkpoint is refused ({rc}: {err.strip()[-160:]})")
check(not os.path.exists(fresh), f"... and the folders it made are gone ({sorted(os.listdir(fresh)) if os.path.exists(fresh) else 'none left'})")
empty = os.path.join(base, "empty")
os.makedirs(empty)
rc, out, err = run(cfg, [f"run.out_dir={empty}", f"checkpoint.dir={empty}/ck", f"checkpoint.resume={base}/no_such_checkpoint.bin"])
check(rc != 0 and os.path.isdir(empty) and os.listdir(empty) == [],
      f"a folder that existed stays, as empty as it was ({rc}: {os.listdir(empty)})")
# A folder that holds another run's files: refused, and the lock file the refused run made goes too.
foreign = os.path.join(base, "foreign_ck")
os.makedirs(foreign)
os.link(ckpt, os.path.join(foreign, os.path.basename(ckpt)))
rc, out, err = run(cfg, [f"run.out_dir={base}/refused_out", f"checkpoint.dir={foreign}"])
check(rc == 2 and "holds 1 checkpoint(s) of run" in err and sorted(os.listdir(foreign)) == [os.path.basename(ckpt)],
      f"a checkpoint.dir holding another run's checkpoint: refused, no lock file left in it ({rc}: {os.listdir(foreign)} "
      f"{err.strip()[-160:]})")
rc, out, err = run(cfg, ["run.steps=1", f"run.out_dir={empty}"])
check(rc == 0 and ".amp_ddp.lock" in os.listdir(empty), f"a run that trains keeps its folder and lock file ({rc}: {err.strip()[-160:]})")
rc, out, err = command(["prepare", os.path.join(base, "no_such_*.txt"), "-o", os.path.join(base, "p", "shards")])
check(rc == 3 and not os.path.exists(os.path.join(base, "p")), f"a refused prepare leaves no folder ({rc}: {tail(err)})")

# ---- integer options given text --------------------------------------------------------------------
for argv, want in ((["sample", ckpt, "--threads", "abc"], 'expected an integer in [0, 1024], got "abc"'),
                   (["sample", ckpt, "--tokens", "1.5"], 'expected an integer in [1, 1048576], got "1.5"'),
                   (["prepare", corpus, "-o", os.path.join(base, "s"), "--shard-tokens", "many"], 'got "many"'),
                   (["prepare", corpus, "-o", os.path.join(base, "s"), "--val-fraction", "half"],
                    'expected a number in [0, 1), got "half"'),
                   (["prepare", corpus, "-o", ""], 'expected a folder path, got ""'),
                   (["sample", ckpt, "--temperature", "1e39"], 'at most 3.4e38 (sample.temperature\'s range), got "1e39"')):
    rc, out, err = command(argv)
    check(rc == 2 and want in err.decode(), f"{' '.join(argv[-2:])}: a usage error saying what was expected ({rc}: {tail(err)})")
rc, out, err = command(["sample", ckpt, "--tokens", "3", "--threads", "1"])
check(rc == 0, f"sample --threads 1 still samples ({rc}: {tail(err)})")

# ---- --doc-separator -------------------------------------------------------------------------------
rc, out, err = command(["prepare", corpus, "-o", os.path.join(base, "sep"), "--tokenizer", "bytes", "-q", "--doc-separator", "%\n%"])
check(rc == 2 and "--doc-separator" in err.decode() and "line break" in err.decode(),
      f"--doc-separator with a line break: a usage error ({rc}: {tail(err)})")
rc, out, err = command(["prepare", corpus, "-o", os.path.join(base, "sep"), "--tokenizer", "bytes", "-q", "--doc-separator", "%"])
check(rc == 0, f"--doc-separator % still prepares ({rc}: {tail(err)})")

# ---- escaped JSON errors -----------------------------------------------------------------------------
with open(ckpt, "rb") as f:
    good = f.read()
at = good.index(b'"run_id"') + len(b'"run_id":"')  # inside the run id's string
# The JSON parser names control bytes itself (<U+001B>); it quoted other bytes as they were.
for byte, shown in ((b"\x1b", b"<U+001B>"), (b"\xff", b"\\xff"), (b"\xc3", b"\\xc3")):
    bad = os.path.join(base, "bad_header.bin")
    with open(bad, "wb") as f:
        f.write(good[:at] + byte + good[at + 1:])
    rc, out, err = command(["sample", bad, "--tokens", "2"])
    check(rc == 4 and b"not valid JSON" in err and shown in err and byte not in err,
          f"a checkpoint header with byte {shown.decode()}: exit 4, the byte escaped in the message ({rc}: {tail(err)})")
st = os.path.join(base, "good.safetensors")
rc, out, err = command(["export", ckpt, "--format", "safetensors", "-o", st])
check(rc == 0, f"export of the checkpoint ({rc}: {tail(err)})")
with open(st, "rb") as f:
    raw = f.read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])
bad = os.path.join(base, "bad_header.safetensors")
text = json.dumps(header).encode()
text = text[:-1] + b',"x":"\x1b[31mred"' + b"}"
text = text.replace(b'"x":"\x1b', b'"x":\x1b')  # a bare control byte: invalid JSON
with open(bad, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + bytes(data))
rc, out, err = command(["eval", cfg, "--set", f"model.init_from={bad}"])
check(rc == 4 and b"not valid JSON" in err and b"\x1b" not in err,
      f"a safetensors header with an escape byte: exit 4, the byte escaped ({rc}: {tail(err)})")

# ---- the safetensors data bytes --------------------------------------------------------------------
names = [k for k in header if k != "__metadata__"]
wte = next(k for k in names if k.endswith("wte.weight"))


def variant(name, edit):
    h, d = json.loads(json.dumps(header)), bytearray(data)
    edit(h, d)
    t = json.dumps(h).encode()
    p = os.path.join(base, name)
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(t)) + t + bytes(d))
    return p


def shift(h, d):  # 4 bytes before the first tensor
    for k in names:
        h[k]["data_offsets"] = [o + 4 for o in h[k]["data_offsets"]]
    d[0:0] = b"\0\0\0\0"


def share(h, d):  # lm_head.weight on wte's own bytes (equal values: tied)
    h["lm_head.weight"] = dict(h[wte])


for name, edit, want in (("trailing.safetensors", lambda h, d: d.extend(b"\0" * 8), "8 bytes after the last tensor's data_offsets"),
                         ("hole.safetensors", shift, "data bytes [0, 4) belong to no tensor"),
                         ("shared.safetensors", share, "overlap those of tensor")):
    p = variant(name, edit)
    rc, out, err = command(["eval", cfg, "--set", f"model.init_from={p}"])
    check(rc == 4 and want in err.decode(), f"{name}: exit 4 naming the bytes ({rc}: {tail(err)})")
rc, out, err = command(["eval", cfg, "--set", f"model.init_from={st}"])
check(rc == 0, f"the exported file itself still loads ({rc}: {tail(err)})")

done()
