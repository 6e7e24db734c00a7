"""scripts/scaling_model.py's account of a network against the program's own: for the GPT (tied
embedding) and the MLP, trained for 2 steps on 2 ranks, the model named in summary.json maps to a
network whose parameter count is the program's and whose buckets add up to the bytes the program
all-reduces per step; --mfu reads the run and reports a model FLOP rate. The projections' inputs
(parameters, gradient bytes, FLOPs) rest on this accounting."""
import json
import os
import subprocess
import sys
from e2e_util import check, done, run, source, summary, tmpdir

sys.path.insert(0, source("scripts"))
import scaling_model as sm  # noqa: E402

base = tmpdir()
text = os.path.join(base, "corpus.txt")
with open(text, "w") as f:
    f.write("\n".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(400)) + "\n")
gpt = os.path.join(base, "gpt.yaml")
with open(gpt, "w") as f:
    f.write(f"""run: {{steps: 2, log_interval: 1, eval_interval: 0, progress: "off", threads: 1}}
model: {{type: gpt, n_layer: 3, n_head: 2, n_embd: 48, seq_len: 24}}
data: {{format: text, text_files: ["{text}"], batch_size: 4}}
precision: {{compute: fp16}}
optimizer: {{type: adamw, lr: 0.001}}
checkpoint: {{final: false}}
sample: {{tokens: 0}}
""")
mlp = source("configs", "seed_dynamic.yaml")
for name, cfg, sets in (("gpt", gpt, []), ("mlp", mlp, ["run.steps=2", "checkpoint.final=false", "model.hidden=[300, 200]"])):
    out = os.path.join(base, name)
    rc, _, err = run(cfg, sets + [f"run.out_dir={out}", "distributed.first_bucket_mb=0.01",
                                  "distributed.bucket_mb=0.05"], np=2)
    check(rc == 0, f"{name}: 2 ranks train 2 steps ({err.strip()[-300:]})")
    if rc != 0:
        continue
    s = summary(out)
    net = sm.net_from_summary(s.get("model"))
    check(net is not None, f"{name}: summary.json names a model the scaling model knows ({s.get('model')!r})")
    if net is None:
        continue
    check(net.params == s["params"], f"{name}: {net.name}: {net.params} parameters, the program has {s['params']}")
    bl = sm.buckets(net, 2, 0.01, 0.05)
    total = sum(b for b, _ in bl)
    check(abs(total - s["allreduce_bytes_per_step"]) < 1e-6,
          f"{name}: {len(bl)} buckets of 16-bit gradients add up to {total:.0f} bytes, the program all-reduces "
          f"{s['allreduce_bytes_per_step']} per step")
    times = [t for _, t in bl]
    check(times == sorted(times) or name == "gpt",
          f"{name}: buckets cut from the end of the buffer become ready in backward order")
    if name == "gpt":  # the tied embedding sits at the start of the buffer and completes last
        check(bl[-1][1] == max(times) and max(times) > times[0],
              f"gpt: the last bucket (the tied embedding) is ready last ({bl[-1][1]:.3f} of the step)")
    p = subprocess.run([sys.executable, source("scripts", "scaling_model.py"), "--mfu", os.path.join(out, "summary.json"),
                        "--peak-tflops", "1"], capture_output=True, text=True)
    line = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), None)
    check(p.returncode == 0 and line is not None and line["tflops"] > 0 and line["model"] == s["model"],
          f"{name}: --mfu reports a model FLOP rate ({p.stdout.strip()[:160]} {p.stderr.strip()[-200:]})")
done()
