"""A GPT-style decoder for `autosched plan` (fp32, causal self-attention, pre-LayerNorm).

    autosched plan examples/gpt.py --memory-budget 60%

The block follows Megatron-LM's layout: LayerNorm -> QKV projection -> core attention
(scores, causal mask, softmax, weighted sum; a parameter-free submodule, so a plan can
recompute it alone) -> output projection -> residual; LayerNorm -> MLP (Linear, GELU,
Linear) -> residual. The blocks live in `model.blocks` (an nn.ModuleList): those are the
layers a plan decides about.

`make_model(..., kernel_library=DIR)` swaps the Linear, GELU and LayerNorm modules for
autosched kernels from an exported library where the library has a kernel of the right
shape (see `use_autosched_kernels`); without a library the model is plain torch.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

CONFIG = dict(n_layer=6, d_model=256, n_head=4, seq_len=128, batch=8, vocab=512)


class CoreAttention(nn.Module):
    """softmax(q k^T / sqrt(d) + causal) v on (batch, heads, seq, head_dim) tensors."""

    def __init__(self, seq_len: int, head_dim: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)
        causal = torch.full((seq_len, seq_len), float("-inf")).triu(1)
        self.register_buffer("causal_bias", causal, persistent=False)

    def forward(self, q, k, v):
        t = q.size(-2)
        scores = (q @ k.transpose(-2, -1)) * self.scale + self.causal_bias[:t, :t]
        return torch.softmax(scores, dim=-1) @ v


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, seq_len: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.core = CoreAttention(seq_len, d_model // n_head)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = self.core(q, k, v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, seq_len: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_head, seq_len)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, n_layer: int, d_model: int, n_head: int, seq_len: int, vocab: int):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not a multiple of n_head={n_head}")
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head, seq_len) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make_model(n_layer=CONFIG["n_layer"], d_model=CONFIG["d_model"], n_head=CONFIG["n_head"],
               seq_len=CONFIG["seq_len"], vocab=CONFIG["vocab"], kernel_library=None, seed=0):
    """The GPT above, deterministic weights; autosched kernels if `kernel_library` is given."""
    torch.manual_seed(seed)
    model = GPT(n_layer, d_model, n_head, seq_len, vocab)
    if kernel_library is not None:
        use_autosched_kernels(model, kernel_library)
    return model


def make_inputs(batch=CONFIG["batch"], seq_len=CONFIG["seq_len"], vocab=CONFIG["vocab"], seed=0):
    """(token ids, next-token targets): the model returns the mean cross-entropy loss."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, seq_len + 1), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def loss_fn(output):
    """The model already returns the loss when targets are given."""
    return output


def use_autosched_kernels(model: nn.Module, library_dir) -> dict:
    """Swap Linear / GELU / LayerNorm modules for autosched kernels from `library_dir`.

    The library is loaded with `autosched.torch.load_library(dir)`, which registers its
    kernels as `torch.ops.autosched.<name>`. A module is swapped only where the library has
    a kernel of the matching kind and shape; the rest stay torch. Returns {module name:
    kernel name} for what was swapped.
    """
    from autosched.runtime.library_modules import swap_modules_for_library
    from autosched.torch import load_library

    return swap_modules_for_library(model, load_library(library_dir))
