"""Bad input gets a clear message naming the file and place, and the documented exit code, on one
rank and under mpirun; nothing hangs. Exit codes: 2 config, 3 data, 5 divergence, 6 ranks disagree."""
import gzip
import os
import struct
import subprocess
from e2e_util import args, check, done, run, source, tmpdir

d = tmpdir()


def write(name, text, mode="w"):
    p = os.path.join(d, name)
    with open(p, mode) as f:
        f.write(text)
    return p


def expect(rc_out_err, code, *fragments, what=""):
    rc, out, err = rc_out_err
    text = out + err
    ok = rc == code and all(f in text for f in fragments)
    check(ok, f"{what}: exit {rc} (want {code}), message has {fragments}" + ("" if ok else f"\n{text[-800:]}"))


# ---- command line
rc, out, err = run("--help")
check(rc == 0 and "--set" in out and "precision.loss_scale.growth_interval" in out, "--help lists options and config keys")
rc, out, err = run("--version")
check(rc == 0 and out.startswith("amp_ddp "), "--version")
expect(run("--nonsense"), 2, "usage error", what="unknown option")
rc, out, err = run(source("configs", "fmnist_mlp_fp16.yaml"), ["optimizer.lr=3e-4"], np=2, extra=["--dry-run"])
check(rc == 0 and out.count("# resolved config") == 1 and "lr: 3e-04" in out, "--dry-run on 2 ranks prints the config once")

# ---- malformed configs, on 1 and 2 ranks
bad_type = write("bad_type.yaml", "run:\n  steps: 10\noptimizer:\n  lr: fast\n")
for np in (None, 2):
    tag = f"np={np or 1}"
    expect(run(bad_type, np=np), 2, f"config error: {bad_type}:4:7: optimizer.lr: expected a positive number, got \"fast\"", what=f"wrong type ({tag})")
expect(run(write("unknown.yaml", "optimizer:\n  momentun: 0.9\n")), 2, "unknown.yaml:2:3: optimizer.momentun: unknown key (did you mean \"optimizer.momentum\"?)", what="unknown key")
expect(run(write("range.yaml", "data:\n  batch_size: 0\n")), 2, "data.batch_size: expected an integer in [1, 16777216], got \"0\"", what="out of range")
expect(run(write("malformed.yaml", "run: {name: [x\n")), 2, "malformed.yaml:", "malformed YAML", what="malformed YAML")
expect(run(write("empty.yaml", "")), 2, "empty.yaml: the file is empty", what="empty file")
expect(run(os.path.join(d, "absent.yaml")), 2, "absent.yaml: cannot open: No such file or directory", what="missing file")
expect(run(write("ok.yaml", "run: {steps: 1}\n"), ["precision.compute=fp4"]), 2, "--set precision.compute=fp4: precision.compute: expected one of fp32, fp16, bf16, fp8", what="bad --set")
# Ranks that disagree (MPMD launch: each rank its own --set).
mpmd = [source("scripts", "mpirun.sh"), "-np", "1", args().binary, bad_type.replace("bad_type", "ok"), "--set", "optimizer.lr=0.1",
        ":", "-np", "1", args().binary, bad_type.replace("bad_type", "ok"), "--set", "optimizer.lr=0.2"]
p = subprocess.run(mpmd, capture_output=True, text=True, timeout=300)
check(p.returncode == 6 and "rank(s) 1 resolved a different config" in p.stderr, f"ranks disagreeing on the config: exit {p.returncode}\n{p.stderr[-400:]}")

# ---- bad data
def idx(name, magic_type, dims, payload, gz=False):
    raw = struct.pack(">BBBB", 0, 0, magic_type, len(dims)) + b"".join(struct.pack(">I", x) for x in dims) + payload
    p = os.path.join(d, name)
    with (gzip.open(p, "wb") if gz else open(p, "wb")) as f:
        f.write(raw)
    return p


images = idx("img.idx", 0x08, [20, 4], bytes(range(80)))
labels = idx("lab.idx", 0x08, [20], bytes([i % 3 for i in range(20)]))
trunc = idx("trunc.idx.gz", 0x08, [20, 4], bytes(50), gz=True)
badlab = idx("badlab.idx", 0x08, [20], bytes([1] * 17 + [12] + [0] * 2))
wrongmagic = write("magic.idx", b"\x08\x08\x08\x01\x00\x00\x00\x14" + bytes(20), "wb")
data_cfg = write("data.yaml", "run: {steps: 2, progress: off}\nmodel: {hidden: [4]}\n"
                 "data: {batch_size: 4, n_classes: 10, eval_images: \"\", eval_labels: \"\"}\n")
def with_data(img, lab):
    return [f"data.train_images={img}", f"data.train_labels={lab}", f"run.out_dir={d}/out"]
check(run(data_cfg, with_data(images, labels))[0] == 0, "the good small IDX set trains")
for np in (None, 2):
    tag = f"np={np or 1}"
    expect(run(data_cfg, with_data(os.path.join(d, "nope.idx"), labels), np=np), 3, "nope.idx: cannot open", what=f"missing data ({tag})")
    expect(run(data_cfg, with_data(trunc, labels), np=np), 3, "trunc.idx.gz", "truncated", what=f"truncated data ({tag})")
expect(run(data_cfg, with_data(wrongmagic, labels)), 3, "magic.idx", "bad IDX magic", what="wrong magic")
expect(run(data_cfg, with_data(images, badlab)), 3, "badlab.idx: element 17: label 12 is out of range [0, 10)", what="label out of range")
ragged = write("ragged.csv", "a,b,y\n1,2,0\n3,4\n")
expect(run(data_cfg, ["data.format=csv", f"data.train_csv={ragged}"]), 3, "ragged.csv:3: row has 2 columns, expected 3", what="ragged CSV")
done()
