"""The operators of the H200 device check: what `prepare.py` builds bundles for here and
what `device_check.py` measures there, each next to torch's own kernel (cuBLAS / cuDNN).

A case is an example op file, a workload in it and its shape arguments, plus the torch
expression that computes the same outputs from the same inputs (in the workload's input
order), so both sides are timed on identical data.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Shared memory: the 48 KiB of static `__shared__` arrays ptxas accepts (TVM's CUDA code
# declares those), and the 227 KiB opt-in of dynamic shared memory (the tensor-core
# sketch's `shared.dyn` pipeline buffers).
H200_TARGET = {"kind": "cuda", "arch": "sm_90a", "max_num_threads": 1024,
               "thread_warp_size": 32, "max_shared_memory_per_block": 49152,
               "max_dynamic_shared_memory_per_block": 232448,
               "registers_per_block": 65536}


MP = "examples/mixed_precision.py"
TC_TRIALS = 24


@dataclass(frozen=True)
class Case:
    name: str
    op_file: str            # relative to the repository root
    workload: str
    args: dict = field(default_factory=dict)
    torch_peer: str = ""    # key of TORCH_PEERS
    # candidates of its bundle round when not --trials: the tensor-core cases draw from
    # four sketches, so about a third of a round's random samples are tensor-core ones
    trials: int | None = None

    def arg_items(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.args.items()]


CASES = (
    Case("matmul_fp32_1024", "examples/matmul.py", "matmul",
         {"M": 1024, "N": 1024, "K": 1024}, "matmul"),
    Case("matmul_fp32_4096", "examples/matmul.py", "matmul",
         {"M": 4096, "N": 4096, "K": 4096}, "matmul"),
    Case("matmul_fp16_4096", "examples/matmul.py", "matmul",
         {"M": 4096, "N": 4096, "K": 4096, "dtype": "float16"}, "matmul"),
    Case("softmax_4096", "examples/softmax.py", "softmax", {"M": 4096, "N": 4096}, "softmax"),
    Case("layer_norm_8192x1024", "examples/softmax.py", "layer_norm",
         {"M": 8192, "N": 1024}, "layer_norm"),
    Case("conv2d_resnet_3x3_64", "examples/conv2d.py", "conv2d",
         {"N": 8, "C": 64, "H": 56, "W": 56, "F": 64}, "conv2d"),
    # tensor cores: 16-bit inputs, fp32 accumulation and output (examples/mixed_precision.py)
    Case("tc_matmul_fp16_4096", MP, "matmul_mp", {"M": 4096, "N": 4096, "K": 4096},
         "matmul_fp32_out", TC_TRIALS),
    Case("tc_matmul_bf16_4096", MP, "matmul_mp",
         {"M": 4096, "N": 4096, "K": 4096, "dtype": "bfloat16"}, "matmul_fp32_out", TC_TRIALS),
    Case("tc_batch_matmul_fp16_32x1024x1024x128", MP, "batch_matmul_mp",
         {"B": 32, "M": 1024, "N": 1024, "K": 128}, "matmul_fp32_out", TC_TRIALS),
    Case("tc_conv2d_nhwc_resnet50_3x3_64", MP, "conv2d_nhwc_mp",
         {"N": 8, "H": 56, "W": 56, "C": 64, "F": 64}, "conv2d_nhwc_fp32_out", TC_TRIALS),
)


def _matmul(a, b):
    return a @ b


def _softmax(x):
    import torch

    return torch.softmax(x, dim=-1)


def _layer_norm(x, gamma, beta, eps=1e-5):
    import torch.nn.functional as F

    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)


def _conv2d(x, w):
    import torch.nn.functional as F

    return F.conv2d(x, w, padding=1)


def _matmul_fp32_out(a, b):
    # cuBLAS accumulates 16-bit products in fp32; the cast is the output our kernels write
    return (a @ b).float()


def _conv2d_nhwc_fp32_out(x, w):
    """NHWC data and OHWI weights as channels-last views: cuDNN's NHWC kernels."""
    import torch.nn.functional as F

    y = F.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), padding=1)
    return y.permute(0, 2, 3, 1).float()


TORCH_PEERS = {"matmul": _matmul, "softmax": _softmax, "layer_norm": _layer_norm,
               "conv2d": _conv2d, "matmul_fp32_out": _matmul_fp32_out,
               "conv2d_nhwc_fp32_out": _conv2d_nhwc_fp32_out}
