"""Convolutions of channels_last models matched to the NHWC workloads, zero-copy.

After ``model.to(memory_format=torch.channels_last)`` (and channels_last inputs) a
convolution's input, weight and output keep their NCHW / KCRS logical shapes with
channels_last strides: in memory they are N, H, W, C and K, R, S, C. An NCHW kernel would
need a contiguous copy of each such tensor per call, and computes in the layout that is
slow on tensor cores. So where the input is channels_last (and not also plain contiguous,
as a tensor with one channel or one pixel is) and the weight and the other 4-d tensors of
the call are channels_last, the call goes to the ``aten_conv2d_nhwc*`` workload of the
same parameters (`te_conv_nhwc.py`): the kernel takes ``t.permute(0, 2, 3, 1)`` of each
4-d tensor, a contiguous view of the same memory, and its output, in memory order, is
permuted back with ``(0, 3, 1, 2)``, a view with the channels_last strides that the
graph's later operators expect. Every other convolution matches as before.

Inductor lays a graph's convolutions out channels_last on its own (its layout
optimization: on the CPU wherever oneDNN runs them, on the GPU by its heuristics), though
the aten graph it is given, traced with eager semantics, says NCHW. An NCHW kernel in
such a graph makes inductor copy each activation back to NCHW around the call, and the
convolutions left to torch run their backward on the copies: a kernel that beat torch's
operator alone then slows the whole step. So where inductor compiles the graph and would
lay it out so (`inductor_lays_out_channels_last`, inductor's own decision on the forward
graph, kept for its backward), every 2-d convolution of the graph goes to its NHWC
workload (`nhwc_match`), as in a channels_last model: the kernel's output, permuted back,
is channels_last, so the operators after it keep the layout inductor wanted, and the
activations the backward reads are channels_last too. The backend makes what is still
NCHW (the model's input, the weights) channels_last in the graph, where inductor fuses
the copy with its own work.

This module reads node values and rewrites matches; it does not import the matcher
(`aten_match.py` imports it), so the floors keep one direction.
"""
from __future__ import annotations

from dataclasses import replace

import torch

TO_NHWC = (0, 2, 3, 1)   # the memory order of a channels_last NCHW (or KCRS) tensor
TO_NCHW = (0, 3, 1, 2)   # back to the logical order
NCHW_BASE, NHWC_BASE = "aten_conv2d", "aten_conv2d_nhwc"


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def is_channels_last(node) -> bool:
    """Whether the node's value is a 4-d tensor laid out channels_last."""
    val = _val(node)
    return isinstance(val, torch.Tensor) and val.dim() == 4 and \
        val.is_contiguous(memory_format=torch.channels_last)


def takes_nhwc(x, *others) -> bool:
    """Whether a convolution of input `x` goes to an NHWC workload: `x` is channels_last
    and not plain contiguous (else the NCHW kernel reads it as it is), and so are the
    call's other 4-d tensors `others` (weight, output gradient) in channels_last."""
    val = _val(x)
    return is_channels_last(x) and not val.is_contiguous() and \
        all(is_channels_last(n) for n in others)


def permuted(shape, perm) -> tuple:
    """`shape` in the order `perm` (None: unchanged)."""
    return tuple(shape) if perm is None else tuple(shape[i] for i in perm)


def inductor_lays_out_channels_last(gm, kind: str) -> bool:
    """Whether inductor compiles the forward or inference aten graph `gm` with its
    convolutions channels_last: inductor's own decision (`GraphLowering.decide_layout_opt`,
    which reads only the graph), so that kernels are matched in the layout inductor will
    give their inputs. Decided on the graph before any rewrite (once every convolution is
    a kernel's, inductor has none left to decide on)."""
    from torch._inductor.graph import GraphLowering

    return bool(GraphLowering.decide_layout_opt(gm, is_inference=kind == "inference"))


def nhwc_match(m):
    """The NHWC form of `m`, an OpMatch of a 2-d convolution workload (forward or one
    gradient): its 4-d inputs given as their memory-order views, its 4-d output permuted
    back; bias and bias gradient (1-d) as they are. Same parameters, same key otherwise.
    Any other match, an NHWC one included, as it is."""
    if m is None or not m.workload.startswith(NCHW_BASE) or m.workload.startswith(NHWC_BASE):
        return m
    perms = tuple(TO_NHWC if len(s) == 4 else None for s in m.input_shapes)
    return replace(m, workload=NHWC_BASE + m.workload[len(NCHW_BASE):],
                   input_shapes=tuple(permuted(s, p) for s, p in zip(m.input_shapes, perms)),
                   input_perms=perms,
                   output_perm=TO_NCHW if len(m.output_shape) == 4 else None)
