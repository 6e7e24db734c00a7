"""The nanoGPT-style model of the PyTorch peers: token + position embeddings, pre-LayerNorm blocks of
causal multi-head attention (written out, as amp_ddp computes it, or PyTorch's fused
scaled_dot_product_attention with sdpa=True) and a GELU (tanh) MLP of width 4C,
final LayerNorm, LM head tied to the token embedding. gpt2_init() is GPT-2's initialization."""
import math

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, c, h, sdpa=False):
        super().__init__()
        self.h, self.sdpa = h, sdpa
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
        self.qkv, self.proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
        self.fc, self.mproj = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:  # PyTorch's fused attention (flash / memory-efficient kernels on a GPU)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.h))
            att = F.softmax(att.masked_fill(mask[:t, :t] == 0, float("-inf")), dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.mproj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, vocab, seq, layers, heads, embd, sdpa=False):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, embd), torch.nn.Embedding(seq, embd)
        self.blocks = torch.nn.ModuleList(Block(embd, heads, sdpa) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(embd)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)))

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x, self.mask)
        return self.ln_f(x) @ self.wte.weight.t()


def gpt2_init(model, layers):
    """Normal(0, 0.02) weights and embeddings, zero biases, LayerNorm 1/0; the residual projections
    (attention output and MLP output) scaled by 1/sqrt(2 x layers)."""
    for name, p in model.named_parameters():
        if name.endswith("bias") or ".ln_" in name or name.startswith("ln_f"):
            torch.nn.init.zeros_(p) if name.endswith("bias") else torch.nn.init.ones_(p)
        elif name.endswith("proj.weight"):  # proj and mproj
            torch.nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
        else:
            torch.nn.init.normal_(p, 0.0, 0.02)
