"""Two "nodes" on one machine (scripts/netns: network namespaces joined by a veth pair, each with
its own hostname): a 2 nodes x 2 ranks training run across them (mpirun through the rsh agent,
TCP between the nodes, shared memory within) trains with world size 4 on both hosts and ends with
the loss of a 4-rank run inside one namespace (same global batch; 16-bit sums may round
differently across transports, so within 1e-2 relative), also with the link rate-limited by
`tc tbf`. Tears the namespaces down in any case. Needs root (skipped where namespaces can't be
made)."""
import os
import re
import shutil
import subprocess
import sys
import time
from e2e_util import args, check, done, losses, skip, source, summary, tmpdir

if os.geteuid() != 0:
    skip("needs root for network namespaces")
if not shutil.which("ip") or not shutil.which("tc"):
    check(False, "iproute2 (ip, tc) missing: scripts/setup.sh installs it")
    done()
probe = f"ampprobe{os.getpid() % 10000}"
p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
if p.returncode != 0:
    skip(f"`ip netns add` not permitted here ({p.stderr.strip()})")
p = subprocess.run(["ip", "netns", "exec", probe, "unshare", "--uts", "true"], capture_output=True, text=True)
subprocess.run(["ip", "netns", "del", probe], capture_output=True)
if p.returncode != 0:
    skip(f"`unshare --uts` not permitted here ({p.stderr.strip()})")

T0 = time.time()
base = tmpdir()
prefix = f"ampt{os.getpid() % 100000}"          # our own namespaces, whatever else runs here
env = dict(os.environ, AMP_NETNS_PREFIX=prefix, AMP_NETNS_SUBNET="10.213.9", OMP_NUM_THREADS="1")
netns = lambda name: source("scripts", "netns", name)
cfg = os.path.join(base, "mn.yaml")
with open(cfg, "w") as f:  # Fashion-MNIST, a small MLP: ~200 KB of 16-bit gradients per step
    f.write("run: {name: multinode, steps: 120, log_interval: 20, progress: off}\n"
            "model: {hidden: [128]}\n"
            "data: {batch_size: 16, normalize: global, eval_images: '', eval_labels: ''}\n"
            "precision: {compute: fp16, loss_scale: {mode: dynamic}}\n"
            "optimizer: {type: adamw, lr: 0.002}\n")


def sh(cmd, timeout=300, extra_env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(env, **(extra_env or {})))
    return p.returncode, p.stdout, p.stderr


def tail(s, n=500):
    return s[-n:].replace("\n", " | ")


def train(out_dir, nodes, ppn, mpirun_args=""):
    # each rank says where it runs, then becomes amp_ddp
    wrap = ["sh", "-c", 'echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(hostname)"; exec "$@"', "wrap"]
    return sh(["bash", netns("run.sh")] + wrap + [args().binary, cfg, "--set", f"run.out_dir={out_dir}"],
              extra_env={"AMP_NETNS_NODES": str(nodes), "AMP_NETNS_PPN": str(ppn), "AMP_NETNS_MPIRUN_ARGS": mpirun_args})


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def tests():
    rc, out, err = sh(["bash", netns("up.sh")])
    check(rc == 0, f"two namespaces up ({tail(out + err)})")
    if rc != 0:
        return
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check(f"{prefix}1" in ns and f"{prefix}2" in ns, f"namespaces {prefix}1 and {prefix}2 exist")

    # 2 nodes x 2 ranks across the veth link
    mn = os.path.join(base, "2x2")
    rc, out, err = train(mn, 2, 2, "--display-map")
    s = summary(mn) if rc == 0 else {}
    check(rc == 0 and s.get("world_size") == 4, f"2 nodes x 2 ranks: world_size {s.get('world_size')} ({tail(err)})")
    hosts = sorted(set(re.findall(r"rank \d+ of 4 on (\S+)", out)))
    check(hosts == [f"{prefix}1", f"{prefix}2"], f"ranks ran on both hosts: {hosts}")
    check(re.search(r"Data for node: " + re.escape(f"{prefix}1") + r"\s+Num slots: 2", out) is not None
          and "Data for node: 10.213.9.2" in out, "--display-map: 2 slots on each node")
    print(f"2x2 done after {time.time() - T0:.1f} s", flush=True)

    # the same global batch on 4 ranks in one namespace (shared memory only)
    sn = os.path.join(base, "1x4")
    rc, out, err = train(sn, 1, 4)
    s1 = summary(sn) if rc == 0 else {}
    hosts1 = sorted(set(re.findall(r"rank \d+ of 4 on (\S+)", out)))
    check(rc == 0 and s1.get("world_size") == 4 and hosts1 == [f"{prefix}1"],
          f"1 node x 4 ranks: world_size {s1.get('world_size')} on {hosts1} ({tail(err)})")
    if s and s1:
        la, lb = s["final_loss"], s1["final_loss"]
        check(rel(la, lb) < 1e-2, f"final loss 2x2 {la:.6f} vs 1x4 {lb:.6f} (rel {rel(la, lb):.1e} < 1e-2)")
        a, b = losses(mn), losses(sn)
        worst = max((rel(x[1], y[1]) for x, y in zip(a, b)), default=1.0)
        check(len(a) == len(b) == 6 and worst < 1e-2, f"every logged loss within 1e-2 (worst {worst:.1e})")
        print(f"params_hash 2x2 {s['params_hash']} 1x4 {s1['params_hash']} "
              f"({'identical' if s['params_hash'] == s1['params_hash'] else 'different rounding'})")
        check(s.get("comm_seconds_per_step", 0) > 0 and s.get("allreduce_bytes_per_step") == s1.get("allreduce_bytes_per_step"),
              f"comm reported: {s.get('allreduce_bytes_per_step')} B/step, {s.get('comm_seconds_per_step', 0) * 1e3:.3f} ms/step")

    # a rate-limited link (tc tbf on both veth ends): still trains to the same loss
    rc, out, err = sh(["bash", netns("rate.sh"), "200mbit"])
    q = subprocess.run(["tc", "-n", f"{prefix}1", "qdisc"], capture_output=True, text=True).stdout
    check(rc == 0 and "tbf" in q and "200Mbit" in q, f"tc tbf 200mbit applied ({tail(q + err)})")
    lim = os.path.join(base, "2x2_200mbit")
    rc, out, err = train(lim, 2, 2)
    s2 = summary(lim) if rc == 0 else {}
    check(rc == 0 and s and rel(s2.get("final_loss", 1e9), s["final_loss"]) < 1e-2,
          f"2x2 over 200 Mbit/s: final loss {s2.get('final_loss')}, comm "
          f"{s2.get('comm_seconds_per_step', 0) * 1e3:.3f} ms/step vs {s.get('comm_seconds_per_step', 0) * 1e3:.3f} unlimited")


try:
    tests()
except Exception as e:  # a timeout or a failed command: a failed check, and tear down all the same
    check(False, f"unexpected error: {e!r}")
finally:
    rc, out, err = sh(["bash", netns("down.sh")], timeout=60)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check(rc == 0 and prefix not in left, f"namespaces removed ({tail(out + err)})")
    shutil.rmtree(base, ignore_errors=True)
    print(f"total {time.time() - T0:.1f} s", flush=True)
done()
