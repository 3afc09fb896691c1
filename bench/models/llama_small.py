"""A Llama-style decoder: RMSNorm, rotary position embedding, a Megatron-style core
attention submodule (causal mask by masked_fill, scale applied to q), a SwiGLU MLP;
4 layers, width 192, 3 heads of 64, 4 x 128 tokens, fp32, for `bench/training_plans.py
--model-file`."""
import torch
from torch import nn
import torch.nn.functional as F

WIDTH, HEADS, LAYERS, HIDDEN, SEQ, BATCH, VOCAB = 192, 3, 4, 512, 128, 4, 512


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class CoreAttention(nn.Module):
    def __init__(self, seq, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5
        self.register_buffer("allowed", torch.ones(seq, seq, dtype=torch.bool).tril(),
                             persistent=False)

    def forward(self, q, k, v):
        t = q.size(-2)
        scores = (q * self.scale) @ k.transpose(-2, -1)
        scores = scores.masked_fill(~self.allowed[:t, :t], float("-inf"))
        return F.softmax(scores, dim=-1) @ v


class Attention(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.wq, self.wk, self.wv = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.wo = nn.Linear(d, d, bias=False)
        self.core = CoreAttention(seq, self.head_dim)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = torch.outer(torch.arange(seq).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (w(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        cos, sin = self.cos[:t], self.sin[:t]
        y = self.core(rotate(q, cos, sin), rotate(k, cos, sin), v)
        return self.wo(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, hidden, seq):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.attn = Attention(d, heads, seq)
        self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList(Block(WIDTH, HEADS, HIDDEN, SEQ) for _ in range(LAYERS))
        self.norm = RMSNorm(WIDTH)
        self.out = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x)
        logits = self.out(self.norm(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def make_model():
    torch.manual_seed(0)
    return Llama()


def make_inputs():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def loss_fn(output):
    return output
