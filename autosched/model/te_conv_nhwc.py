"""The tensor expressions of channels_last (NHWC) convolutions and their gradients.

A model converted with ``model.to(memory_format=torch.channels_last)`` holds its
activations as N, H, W, C in memory and its convolution weights as K, R, S, C (OHWI)
while their logical shapes stay NCHW and KCRS. These workloads take the tensors in their
memory order (the permuted views the matcher hands them, which are contiguous: no copy)
and write the output in memory order too; the matcher permutes it back to the logical
NCHW shape, whose strides are then the channels_last ones the graph's later operators
expect. The reduction reads C (or K) innermost, where both operands are contiguous, which
is the layout the implicit-GEMM / tensor-core sketches stage best.

The computations are `te_conv.py`'s, in its `NHWC` layout; the parameters are the NCHW
workloads' (`te_conv.conv2d` and its gradients), so one aten call gives the same numbers
in either layout and only the workload name differs.
"""
from __future__ import annotations

from .te_conv import NHWC, conv2d_workloads

conv2d_nhwc, conv2d_nhwc_grad_input, conv2d_nhwc_grad_weight, conv2d_nhwc_grad_bias = \
    conv2d_workloads(NHWC, "conv2d_nhwc")
