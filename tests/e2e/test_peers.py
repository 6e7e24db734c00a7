"""The PyTorch throughput peers train honestly (bench/peers/torch_mlp.py, torch_gpt.py): each
peer's own --check (a short run on the real data amp_ddp trains on, small sizes) passes in FP32 and
BF16, and fails when the peer is made to repeat one batch (the degenerate mode of the old peers:
a memorized batch, its loss far below the loss on samples it never saw). Needs Debian's
python3-torch (scripts/peer_env.sh installs it for the benchmarks); without it the test is
reported as skipped (exit 77), never as passed."""
import os
import subprocess
import sys
from e2e_util import check, done, skip, source, tmpdir

PY = "/usr/bin/python3"
PEERS = os.path.abspath(source("bench", "peers"))
if subprocess.run([PY, "-c", "import torch, yaml"], capture_output=True).returncode != 0:
    skip("Debian's python3-torch (and python3-yaml) are not installed; the peers cannot run here")
if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
    skip("Fashion-MNIST (dataset-fashion-mnist) is not installed")

env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=PEERS)


def peer(script, *argv):
    p = subprocess.run([PY, os.path.join(PEERS, script), "--check"] + list(argv), capture_output=True, text=True,
                       env=env, timeout=300, cwd=PEERS)
    return p.returncode, (p.stdout + p.stderr).strip()


for script in ("torch_mlp.py", "torch_gpt.py"):
    for prec in ("fp32", "bf16"):
        rc, out = peer(script, "--precision", prec)
        check(rc == 0 and "FAULT" not in out, f"{script} --check --precision {prec}: {out.splitlines()[0] if out else ''}")

# The check can fail: the same peers with every step given batch 0 (one batch repeated).
fixed = os.path.join(tmpdir(), "fixed_batch.py")
with open(fixed, "w") as f:
    f.write("import runpy, sys\nimport peer_data\n"
            "orig = peer_data.Batches.indices\n"
            "peer_data.Batches.indices = lambda self, i: orig(self, 0)\n"
            "sys.argv = [sys.argv[1], '--check']\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n")
for script in ("torch_mlp.py", "torch_gpt.py"):
    p = subprocess.run([PY, fixed, os.path.join(PEERS, script)], capture_output=True, text=True, env=env, timeout=300,
                       cwd=PEERS)
    out = (p.stdout + p.stderr).strip()
    check(p.returncode == 1 and "memorized" in out, f"{script} repeating one batch fails its check: {out.splitlines()[0] if out else ''}")
done()
