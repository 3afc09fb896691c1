"""PyTorch reference implementations of the workloads in `nn_ops.py`.

`autosched.torch.load_library(..., fallback=True)` runs these for shapes that the kernel
library lacks. Each takes the workload's input tensors in order and returns its output(s);
a keyword parameter named like a workload parameter (``eps``) receives the library's value.
"""
import math

import torch

_GELU_C = math.sqrt(2.0 / math.pi)


def linear(x, w, b):
    return x @ w.t() + b


def linear_grad_x(dy, w):
    return dy @ w


def linear_grad_w(dy, x):
    return dy.t() @ x


def column_sum(dy):
    return dy.sum(dim=0)


def matmul(a, b):
    return a @ b


def matmul_grad_a(dc, b):
    return dc @ b.t()


def matmul_grad_b(a, dc):
    return a.t() @ dc


def gelu(x):
    return torch.nn.functional.gelu(x, approximate="tanh")


def gelu_grad(x, dy):
    t = torch.tanh(_GELU_C * (x + 0.044715 * x ** 3))
    du = _GELU_C * (1.0 + 3 * 0.044715 * x * x)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


def gelu_exact(x):
    return torch.nn.functional.gelu(x)


def gelu_exact_grad(dy, x):
    return torch.ops.aten.gelu_backward(dy, x)


def linear_gelu_exact(x, w, b):
    return torch.nn.functional.gelu(x @ w.t() + b)


def softmax(x):
    return torch.softmax(x, dim=-1)


def softmax_grad(y, dy):
    return y * (dy - (dy * y).sum(dim=-1, keepdim=True))


def _xhat(x, eps):
    mean = x.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(x.var(dim=-1, unbiased=False, keepdim=True) + eps)
    return (x - mean) * rstd, rstd


def layer_norm(x, gamma, beta, eps=1e-5):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)


def layer_norm_grad_x(x, gamma, dy, eps=1e-5):
    xhat, rstd = _xhat(x, eps)
    g = dy * gamma
    return rstd * (g - g.mean(dim=-1, keepdim=True)
                   - xhat * (g * xhat).mean(dim=-1, keepdim=True))


def layer_norm_grad_gamma(x, dy, eps=1e-5):
    xhat, _ = _xhat(x, eps)
    return (dy * xhat).sum(dim=0)
