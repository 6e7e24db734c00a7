"""The cross-entropy divergence rule (run.max_loss_vs_uniform, default 4 x ln(classes)): a diverged
GPT (the hostile round's: loss 5.5 -> thousands, exit 0 "done") now stops with exit 5 naming the
rule, in FP32 and BF16; a model stuck at the uniform prediction (FP16 without loss scaling, which
never learns) is not stopped; and every shipped config with a cross-entropy trains its first steps
(the highest losses of a healthy run: it starts near ln(classes) and falls) far below the bound
(each config's worst interval loss / ln(classes) is printed). Regression configs (MSE) have no
uniform yardstick: run.max_loss_ratio covers them and they still finish."""
import math
from e2e_util import QUICK_EVAL, check, done, metrics, run, source, tmpdir

base = tmpdir()
common = ["run.log_interval=10", "run.progress=off", "checkpoint.final=false", "run.threads=2"] + QUICK_EVAL

# A diverging GPT: a learning rate of 5 without clipping or warm-up.
for prec in ("fp32", "bf16"):
    out = f"{base}/div_{prec}"
    rc, o, e = run(source("configs", f"gpt_fortunes_{prec}.yaml"),
                   common + ["run.steps=60", "optimizer.lr=5", "optimizer.grad_clip=0", "optimizer.warmup_steps=0",
                             "run.eval_interval=0", "sample.tokens=0", f"run.out_dir={out}"])
    check(rc == 5 and "run.max_loss_vs_uniform" in e, f"a diverging GPT ({prec}) stops with exit 5 naming the rule "
          f"(rc {rc}: {e.strip().splitlines()[-1] if e.strip() else ''})")

# Healthy runs of every shipped cross-entropy config: the worst interval loss against ln(classes).
cases = [("fmnist_mlp_fp32.yaml", 10, 100), ("fmnist_mlp_fp16.yaml", 10, 100), ("fmnist_mlp_bf16.yaml", 10, 100),
         ("fmnist_fp16_underflow.yaml", 10, 100),  # never learns: stays at the uniform loss, must not stop
         ("gpt_fortunes_fp32.yaml", 256, 100), ("gpt_fortunes_fp16.yaml", 256, 100),
         ("gpt_fortunes_bf16.yaml", 256, 100)]
for cfg, classes, steps in cases:
    out = f"{base}/{cfg}"
    rc, o, e = run(source("configs", cfg), common + [f"run.steps={steps}", "run.eval_interval=0", "sample.tokens=0",
                                                     f"run.out_dir={out}"])
    losses = [m["loss"] for m in metrics(out) if "loss" in m] if rc == 0 else []
    worst = max(losses) / math.log(classes) if losses else float("inf")
    check(rc == 0 and worst < 2.0, f"{cfg}: {steps} steps finish (rc {rc}); worst interval loss / ln({classes}) = "
          f"{worst:.3f} (the rule stops at 4)")
# Regression: no uniform yardstick, the run finishes.
for cfg in ("seed_static.yaml", "seed_dynamic.yaml"):
    rc, o, e = run(source("configs", cfg), common + ["run.steps=100", f"run.out_dir={base}/{cfg}"])
    check(rc == 0, f"{cfg} (MSE) finishes (rc {rc})")
done()
