#!/usr/bin/env python3
"""Reference values for the C++ GPT-2-style decoder (forward, loss and gradients), in float64 PyTorch.

Writes tests/data/gpt_tiny_reference.json (layout: tests/data/README.md). CI does not run this script
and has no torch; the C++ test only reads the committed JSON. Regenerate with:

    OMP_NUM_THREADS=1 /usr/bin/python3 scripts/gpt_reference.py [OUT_JSON]

Model (nanoGPT / GPT-2, no dropout): x = wte[tok] + wpe[pos]; per block x += attn.proj(attn(ln_1(x)));
x += mlp.proj(gelu_tanh(mlp.fc(ln_2(x)))); logits = ln_f(x) @ wte^T (tied head, no bias); loss = mean
cross-entropy over all B*T positions. Parameter names, shapes and order are those of the C++ code.

Sanity checks (printed): 5-point central finite differences of sampled gradient entries against autograd; the
tied wte gradient against the sum of its embedding and head contributions computed separately; the
torch forward against an independent numpy forward; GELU against its tanh formula.
"""
import json
import math
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)

SEED = 20261201
CFG = dict(vocab_size=64, n_layer=2, n_head=2, n_embd=16, seq_len=8, batch=2, ln_eps=1e-5)
V, L, H, C, T, B, EPS = (CFG[k] for k in ("vocab_size", "n_layer", "n_head", "n_embd", "seq_len", "batch", "ln_eps"))
D = C // H


def param_specs():
    """(name, shape, kind) in the order of the C++ parameter layout. kind selects the init."""
    specs = [("wte.weight", (V, C), "w"), ("wpe.weight", (T, C), "w")]
    for l in range(L):
        p = f"h.{l}."
        specs += [
            (p + "ln_1.weight", (C,), "g"), (p + "ln_1.bias", (C,), "b"),
            (p + "attn.qkv.weight", (3 * C, C), "w"), (p + "attn.qkv.bias", (3 * C,), "b"),
            (p + "attn.proj.weight", (C, C), "w"), (p + "attn.proj.bias", (C,), "b"),
            (p + "ln_2.weight", (C,), "g"), (p + "ln_2.bias", (C,), "b"),
            (p + "mlp.fc.weight", (4 * C, C), "w"), (p + "mlp.fc.bias", (4 * C,), "b"),
            (p + "mlp.proj.weight", (C, 4 * C), "w"), (p + "mlp.proj.bias", (C,), "b"),
        ]
    specs += [("ln_f.weight", (C,), "g"), ("ln_f.bias", (C,), "b")]
    return specs


def make_data():
    """Parameters (drawn in layout order), then the token stream, all from one numpy generator."""
    rng = np.random.default_rng(SEED)
    values = {}
    for name, shape, kind in param_specs():
        z = rng.standard_normal(shape)
        values[name] = {"w": 0.1 * z, "g": 1.0 + 0.1 * z, "b": 0.05 * z}[kind]
    stream = rng.integers(0, V, size=B * (T + 1))
    windows = stream.reshape(B, T + 1)
    return values, windows[:, :T].copy(), windows[:, 1:].copy()


def layer_norm(x, w, b):
    return F.layer_norm(x, (C,), w, b, EPS)  # biased variance, eps inside the sqrt


def forward(P, tok, tgt, acts=None, wte_head=None):
    """P: name -> tensor. wte_head, if given, is used for the LM head instead of P['wte.weight'] (to
    split the tied gradient). acts, if a dict, receives the debugging activations."""
    rec = (lambda k, v: acts.__setitem__(k, v)) if acts is not None else (lambda k, v: None)
    x = P["wte.weight"][tok] + P["wpe.weight"][torch.arange(T)]  # [B, T, C]
    rec("embed", x)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = f"h.{l}."
        a = layer_norm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
        qkv = F.linear(a, P[p + "attn.qkv.weight"], P[p + "attn.qkv.bias"])  # [B, T, 3C]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        s = s.masked_fill(~causal, float("-inf"))
        pr = torch.softmax(s, dim=-1)  # [B, H, T, T]
        y = (pr @ v).transpose(1, 2).reshape(B, T, C)  # heads back in head order
        x = x + F.linear(y, P[p + "attn.proj.weight"], P[p + "attn.proj.bias"])
        rec(p + "attn_residual", x)
        m = layer_norm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
        m = F.gelu(F.linear(m, P[p + "mlp.fc.weight"], P[p + "mlp.fc.bias"]), approximate="tanh")
        x = x + F.linear(m, P[p + "mlp.proj.weight"], P[p + "mlp.proj.bias"])
        rec(p + "ln_1", a)
        rec(p + "qkv", qkv)
        rec(p + "attn_probs", pr)
        rec(p + "attn_out", y)
        rec(p + "block_out", x)
    xf = layer_norm(x, P["ln_f.weight"], P["ln_f.bias"])
    rec("ln_f", xf)
    logits = xf @ (P["wte.weight"] if wte_head is None else wte_head).t()  # [B, T, V]
    loss = F.cross_entropy(logits.reshape(B * T, V), tgt.reshape(B * T))
    return logits, loss


def numpy_forward(vals, tok, tgt):
    """An independent, loop-per-head numpy forward: returns (logits [B*T, V], loss)."""
    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + EPS) * w + b

    def gelu(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    x = vals["wte.weight"][tok] + vals["wpe.weight"][np.arange(T)][None]
    for l in range(L):
        p = f"h.{l}."
        a = ln(x, vals[p + "ln_1.weight"], vals[p + "ln_1.bias"])
        qkv = a @ vals[p + "attn.qkv.weight"].T + vals[p + "attn.qkv.bias"]
        y = np.zeros((B, T, C))
        for bb in range(B):
            for h in range(H):
                q = qkv[bb, :, h * D:(h + 1) * D]
                k = qkv[bb, :, C + h * D:C + (h + 1) * D]
                v = qkv[bb, :, 2 * C + h * D:2 * C + (h + 1) * D]
                for i in range(T):
                    s = np.array([q[i] @ k[j] / math.sqrt(D) for j in range(i + 1)])
                    e = np.exp(s - s.max())
                    y[bb, i, h * D:(h + 1) * D] = (e / e.sum()) @ v[:i + 1]
        x = x + y @ vals[p + "attn.proj.weight"].T + vals[p + "attn.proj.bias"]
        m = ln(x, vals[p + "ln_2.weight"], vals[p + "ln_2.bias"])
        m = gelu(m @ vals[p + "mlp.fc.weight"].T + vals[p + "mlp.fc.bias"])
        x = x + m @ vals[p + "mlp.proj.weight"].T + vals[p + "mlp.proj.bias"]
    logits = (ln(x, vals["ln_f.weight"], vals["ln_f.bias"]) @ vals["wte.weight"].T).reshape(B * T, V)
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return logits, -logp[np.arange(B * T), tgt.reshape(-1)].mean()


def rel_err(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gpt_tiny_reference.json")
    print(f"torch {torch.__version__}, numpy {np.__version__}, default dtype {torch.get_default_dtype()}, "
          f"threads {torch.get_num_threads()}")
    specs = param_specs()
    vals, tok_np, tgt_np = make_data()
    P = {n: torch.tensor(vals[n], requires_grad=True) for n, _, _ in specs}
    tok, tgt = torch.tensor(tok_np), torch.tensor(tgt_np)

    acts = {}
    logits, loss = forward(P, tok, tgt, acts)
    acts["embed"].retain_grad()  # for the embedding part of the tied wte gradient (check 4)
    loss.backward()
    grads = {n: P[n].grad.detach().clone() for n, _, _ in specs}
    assert all(t.dtype == torch.float64 for t in list(P.values()) + [logits, loss])
    print(f"loss {loss.item()!r} (ln(V) = {math.log(V)!r})")

    # --- check 1: independent numpy forward
    np_logits, np_loss = numpy_forward(vals, tok_np, tgt_np)
    e_fwd = float(np.abs(np_logits - logits.detach().numpy().reshape(B * T, V)).max())
    print(f"check numpy forward: max |logits diff| {e_fwd:.3e}, loss rel err {rel_err(np_loss, loss.item()):.3e}")
    assert e_fwd < 1e-12 and rel_err(np_loss, loss.item()) < 1e-12

    # --- check 2: GELU tanh against its formula
    xs = torch.linspace(-6, 6, 1001)
    g_ref = 0.5 * xs * (1 + torch.tanh(math.sqrt(2 / math.pi) * (xs + 0.044715 * xs ** 3)))
    e_gelu = (F.gelu(xs, approximate="tanh") - g_ref).abs().max().item()
    print(f"check gelu tanh formula: max abs diff {e_gelu:.3e}")
    assert e_gelu < 1e-14

    # --- check 3: 5-point central finite differences of sampled gradient entries
    rng = np.random.default_rng(SEED + 1)
    eps_fd = 1e-4
    worst, worst_at = 0.0, None
    n_checked = 0
    with torch.no_grad():
        for name, shape, _ in specs:
            flat = P[name].view(-1)
            idx = list(rng.choice(flat.numel(), size=min(3, flat.numel()), replace=False))
            if name == "wte.weight":  # also rows that are both looked up and in the head
                idx += [int(tok_np[0, 0]) * C + 3, int(tok_np[1, 5]) * C + 7]
            for i in idx:
                old = flat[i].item()
                f = {}
                for m in (-2, -1, 1, 2):
                    flat[i] = old + m * eps_fd
                    f[m] = forward(P, tok, tgt)[1].item()
                flat[i] = old
                fd = (f[-2] - 8 * f[-1] + 8 * f[1] - f[2]) / (12 * eps_fd)  # error O(h^4) + O(ulp / h)
                ag = grads[name].view(-1)[i].item()
                # entries with a tiny gradient are judged on absolute error against the loss scale
                err = rel_err(fd, ag) if max(abs(fd), abs(ag)) > 1e-6 else abs(fd - ag)
                if err > worst:
                    worst, worst_at = err, (name, int(i), ag)
                n_checked += 1
    print(f"check finite differences (5-point central, h={eps_fd}): {n_checked} entries over {len(specs)} tensors, "
          f"max rel err {worst:.3e} (at {worst_at[0]}[{worst_at[1]}], grad {worst_at[2]:.3e})")
    assert worst < 1e-7

    # --- check 4: tied wte gradient = embedding contribution + head contribution
    P2 = {n: P[n].detach().clone().requires_grad_(True) for n, _, _ in specs}
    head = P[specs[0][0]].detach().clone().requires_grad_(True)
    _, loss2 = forward(P2, tok, tgt, wte_head=head)
    loss2.backward()
    g_emb, g_head = P2["wte.weight"].grad, head.grad
    # the same two contributions written out by hand
    xf = acts["ln_f"].detach().reshape(B * T, C)
    dlogits = (torch.softmax(logits.detach().reshape(B * T, V), -1) - F.one_hot(tgt.reshape(-1), V)) / (B * T)
    g_head_manual = dlogits.t() @ xf
    g_emb_manual = torch.zeros(V, C).index_add_(0, tok.reshape(-1), acts["embed"].grad.reshape(B * T, C))
    tied = grads["wte.weight"]
    e_sum = ((g_emb + g_head) - tied).abs().max().item() / tied.abs().max().item()
    e_manual = ((g_emb_manual + g_head_manual) - tied).abs().max().item() / tied.abs().max().item()
    e_head = (g_head_manual - g_head).abs().max().item() / g_head.abs().max().item()
    print(f"check tied wte grad: |emb + head - tied| / max|tied| = {e_sum:.3e} (autograd split), "
          f"{e_manual:.3e} (by hand); head part by hand vs autograd {e_head:.3e}; "
          f"max|emb part| {g_emb.abs().max().item():.3e}, max|head part| {g_head.abs().max().item():.3e}")
    assert e_sum < 1e-14 and e_manual < 1e-13 and e_head < 1e-13

    # --- write
    def flat(t):
        return [float(v) for v in t.detach().reshape(-1).tolist()]

    params, offset = [], 0
    for name, shape, _ in specs:
        n = int(np.prod(shape))
        params.append({"name": name, "shape": list(shape), "offset": offset, "size": n})
        offset += n
    act_names = ["embed", "h.0.ln_1", "h.0.qkv", "h.0.attn_probs", "h.0.attn_out", "h.0.attn_residual",
                 "h.0.block_out", "ln_f"]
    doc = {
        "format": "amp_ddp gpt reference v1 (tests/data/README.md)",
        "generator": {"script": "scripts/gpt_reference.py", "torch": torch.__version__, "numpy": np.__version__,
                      "dtype": "float64", "seed": SEED},
        "config": CFG,
        "n_params": offset,
        "params": params,
        "param_values": [v for name, _, _ in specs for v in flat(P[name])],
        "tokens": [int(t) for t in tok_np.reshape(-1)],
        "targets": [int(t) for t in tgt_np.reshape(-1)],
        "logits": flat(logits),
        "loss": float(loss.item()),
        "param_grads": [v for name, _, _ in specs for v in flat(grads[name])],
        "activations": [{"name": n, "shape": list(acts[n].shape), "values": flat(acts[n])} for n in act_names],
    }
    # floats as repr (shortest round-trip form); one top-level key per line
    text = "{\n" + ",\n".join(json.dumps(k) + ":" + json.dumps(v, separators=(",", ":"), allow_nan=False)
                            for k, v in doc.items()) + "\n}\n"
    back = json.loads(text)
    assert back["param_grads"] == doc["param_grads"] and back["logits"] == flat(logits)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    print(f"wrote {os.path.normpath(out)}: {len(text)} bytes, {offset} parameters")


if __name__ == "__main__":
    main()
