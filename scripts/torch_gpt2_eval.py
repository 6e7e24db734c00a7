"""The evaluation loss of an exported GPT (amp_ddp export --format safetensors) in PyTorch: the
safetensors file is read with the standard library and torch, its Hugging Face GPT-2 tensors put
into the nanoGPT-style model of bench/peers/nanogpt.py (Conv1D weights [in, out] transposed into
Linear's [out, in]; the LM head tied to the token embedding), and the loss is averaged over the
windows amp_ddp evaluates: non-overlapping windows of seq_len + 1 tokens of the evaluation shards,
in order (run.eval_iters 0). Prints "torch eval loss X over N windows".

  /usr/bin/python3 scripts/torch_gpt2_eval.py --weights model.safetensors --heads 4 --seq-len 64 \\
      --tokens 'data/fortunes_val_*.bin' [--batch 16]

With --write-random PREFIX --layers L --embd C --vocab V it first makes a GPT-2 of that shape
in PyTorch (GPT-2's initialization, then every LayerNorm and bias perturbed and the embedding
widened to a standard deviation of 0.5, so that no tensor is trivial and the logits are far from
uniform) and writes it in both formats amp_ddp imports, PREFIX.safetensors (Hugging Face's names
and Conv1D orientation) and PREFIX.llmc.bin (llm.c's version 3 model file, vocabulary padded to a
multiple of 128), then evaluates those weights as above: the reference for model.init_from.

Needs Debian's python3-torch (scripts/peer_env.sh installs it)."""
import argparse
import glob
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from nanogpt import GPT  # noqa: E402


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        if h["dtype"] != "F32":
            sys.exit(f"{path}: {name}: dtype {h['dtype']}, expected F32")
        b, e = h["data_offsets"]
        out[name] = torch.frombuffer(data[b:e], dtype=torch.float32).reshape(h["shape"]).clone()
    return out


def read_shard(path):
    raw = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", raw[:12])
    if (magic, version) == (20240520, 1):
        dtype = torch.int16  # uint16 read as int16, then widened
        t = torch.frombuffer(bytearray(raw[1024:1024 + 2 * count]), dtype=dtype).to(torch.int64) & 0xFFFF
    elif (magic, version) == (20240801, 7):
        t = torch.frombuffer(bytearray(raw[1024:1024 + 4 * count]), dtype=torch.int32).to(torch.int64)
    else:
        sys.exit(f"{path}: not an llm.c token shard (magic {magic}, version {version})")
    return t


HF_NAMES = {"ln_1": "ln_1", "ln_2": "ln_2", "attn.c_attn": "qkv", "attn.c_proj": "proj", "mlp.c_fc": "fc",
            "mlp.c_proj": "mproj"}


def write_random(prefix, layers, heads, embd, vocab, seq):
    torch.manual_seed(1234)
    from nanogpt import gpt2_init
    model = GPT(vocab, seq, layers, heads, embd)
    gpt2_init(model, layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # LayerNorm gains and biases, and every bias
                p.add_(0.1 * torch.randn_like(p))
        model.wte.weight.normal_(0.0, 0.5)  # logits far from uniform: the loss depends on every weight
    sd = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}
    # Hugging Face GPT-2: Conv1D weights [in, out].
    hf = {"wte.weight": sd["wte.weight"], "wpe.weight": sd["wpe.weight"], "ln_f.weight": sd["ln_f.weight"],
          "ln_f.bias": sd["ln_f.bias"]}
    for l in range(layers):
        for h, ours in HF_NAMES.items():
            w = sd[f"blocks.{l}.{ours}.weight"]
            hf[f"h.{l}.{h}.weight"] = w if h.startswith("ln_") else w.t().contiguous()
            hf[f"h.{l}.{h}.bias"] = sd[f"blocks.{l}.{ours}.bias"]
    header, blobs, off = {}, [], 0
    for name in sorted(hf):
        b = hf[name].numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(hf[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(prefix + ".safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    # llm.c: header, then the tensors in its order, Linear weights [out, in], wte padded.
    vp = (vocab + 127) // 128 * 128
    hdr = [20240326, 3, seq, vocab, layers, heads, embd, vp] + [0] * 248
    wte = torch.zeros(vp, embd)
    wte[:vocab] = sd["wte.weight"]
    per_layer = lambda fmt: torch.stack([sd[fmt.format(l)] for l in range(layers)])
    order = [wte, sd["wpe.weight"], per_layer("blocks.{}.ln_1.weight"), per_layer("blocks.{}.ln_1.bias"),
             per_layer("blocks.{}.qkv.weight"), per_layer("blocks.{}.qkv.bias"), per_layer("blocks.{}.proj.weight"),
             per_layer("blocks.{}.proj.bias"), per_layer("blocks.{}.ln_2.weight"), per_layer("blocks.{}.ln_2.bias"),
             per_layer("blocks.{}.fc.weight"), per_layer("blocks.{}.fc.bias"), per_layer("blocks.{}.mproj.weight"),
             per_layer("blocks.{}.mproj.bias"), sd["ln_f.weight"], sd["ln_f.bias"]]
    with open(prefix + ".llmc.bin", "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        for t in order:
            f.write(t.contiguous().numpy().tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", help="the safetensors file (default with --write-random: PREFIX.safetensors)")
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--tokens", required=True, help="evaluation shards (a glob, sorted)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--write-random", metavar="PREFIX")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--embd", type=int)
    ap.add_argument("--vocab", type=int, default=50257)
    a = ap.parse_args()
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    if a.write_random:
        write_random(a.write_random, a.layers, a.heads, a.embd, a.vocab, a.seq_len)

    w = read_safetensors(a.weights or a.write_random + ".safetensors")
    w = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in w.items()}
    V, C = w["wte.weight"].shape
    L = 1 + max(int(k.split(".")[1]) for k in w if k.startswith("h."))
    model = GPT(V, a.seq_len, L, a.heads, C)
    sd = {"wte.weight": w["wte.weight"], "wpe.weight": w["wpe.weight"][:a.seq_len],
          "ln_f.weight": w["ln_f.weight"], "ln_f.bias": w["ln_f.bias"], "mask": model.mask}
    for l in range(L):
        for hf, ours in HF_NAMES.items():
            wt = w[f"h.{l}.{hf}.weight"]
            sd[f"blocks.{l}.{ours}.weight"] = wt if hf.startswith("ln_") else wt.t().contiguous()
            sd[f"blocks.{l}.{ours}.bias"] = w[f"h.{l}.{hf}.bias"]
    model.load_state_dict(sd, strict=True)
    model.eval()

    files = sorted(glob.glob(a.tokens))
    if not files:
        sys.exit(f"--tokens {a.tokens}: no file matches")
    tokens = torch.cat([read_shard(f) for f in files])
    T = a.seq_len
    n = (tokens.numel() - 1) // T
    total, count = 0.0, 0
    with torch.no_grad():
        for b0 in range(0, n, a.batch):
            idx = torch.stack([tokens[i * T:i * T + T + 1] for i in range(b0, min(n, b0 + a.batch))])
            logits = model(idx[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, V).double(), idx[:, 1:].reshape(-1), reduction="sum")
            total += float(loss)
            count += idx[:, 1:].numel()
    print(f"torch eval loss {total / count:.6f} over {n} windows of {T} tokens ({count} tokens), "
          f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
