"""Torch's one call that computes several outputs of one aten operator: the peer of the
kernels that replace those outputs together.

A convolution's backward (`aten.convolution_backward`) and a layer norm's
(`aten.native_layer_norm_backward`) compute their input, weight and bias gradients in one
call, and torch shares work between them (oneDNN reorders the output gradient once).
autosched has one kernel per output (extraction's siblings), and the backend replaces a
call's outputs together or not at all. Timing each kernel against a torch call that
computes its output alone would compare it with a computation the model never makes; the
group of kernels is timed instead against the one call with the same outputs in its mask
(`export._build_and_time`), and chosen or left to torch as a whole.
"""
from __future__ import annotations

from collections.abc import Callable

# workload -> (the operator it is an output of, the output's index in that operator)
OUTPUTS = {
    "aten_conv2d_grad_input": ("conv2d", 0),
    "aten_conv2d_grad_weight": ("conv2d", 1),
    "aten_conv2d_grad_bias": ("conv2d", 2),
    "aten_conv2d_nhwc_grad_input": ("conv2d_nhwc", 0),
    "aten_conv2d_nhwc_grad_weight": ("conv2d_nhwc", 1),
    "aten_conv2d_nhwc_grad_bias": ("conv2d_nhwc", 2),
    "aten_layer_norm_grad_input": ("layer_norm", 0),
    "aten_layer_norm_grad_gamma": ("layer_norm", 1),
    "aten_layer_norm_grad_beta": ("layer_norm", 2),
}


def joint_operator(workloads) -> str | None:
    """The operator whose one call computes the outputs of `workloads` (two or more,
    each a different output of it); None for any other set."""
    parts = [OUTPUTS.get(w) for w in workloads]
    if len(parts) < 2 or None in parts or len({p[0] for p in parts}) != 1 \
            or len({p[1] for p in parts}) != len(parts):
        return None
    return parts[0][0]


def sibling_groups(model_ops) -> list[tuple[int, ...]]:
    """The indices into `model_ops.ops` of each set of tasks whose outputs one aten call
    computes together (tasks joined through `ModelOp.siblings`, first-seen order), where
    torch computes them in one call (`joint_operator`). Where two calls of different
    shapes share a task (the bias gradient of two biased convolutions with the same
    output shape), the joined set repeats an output and is no one call: it is left out
    (its kernels are timed one by one)."""
    index = {op.key: i for i, op in enumerate(model_ops.ops)}
    seen, out = set(), []
    for i, op in enumerate(model_ops.ops):
        if i in seen or not op.siblings:
            continue
        group, todo = set(), [i]
        while todo:
            j = todo.pop()
            if j in group:
                continue
            group.add(j)
            todo += [index[k] for k in model_ops.ops[j].siblings if k in index]
        seen |= group
        ordered = tuple(sorted(group))
        if joint_operator([model_ops.ops[j].workload for j in ordered]) is not None:
            out.append(ordered)
    return out


def joint_call(members) -> Callable:
    """A callable without arguments running torch's one call that computes the outputs
    of `members`, [(workload, params, kernel-ordered tensors)], on those tensors (the
    output gradient of the first member; a tensor no member takes, such as the weight of
    a convolution whose input gradient is not wanted, holds no data: `workloads.unread`,
    as torch.nn.grad passes it)."""
    operator = joint_operator([w for w, _, _ in members])
    if operator is None:
        raise ValueError(f"not the outputs of one operator call: "
                         f"{', '.join(w for w, _, _ in members)}")
    parts = {OUTPUTS[w][1]: (dict(params), list(tensors)) for w, params, tensors in members}
    mask = [i in parts for i in range(3)]
    if operator == "layer_norm":
        return _layer_norm(parts, mask)
    return _conv2d(parts, mask, nhwc=operator == "conv2d_nhwc")


def _conv2d(parts, mask, nhwc: bool) -> Callable:
    from .conv_layouts import TO_NCHW
    from .workloads import conv2d_backward, unread

    # the input and weight gradients carry the convolution's parameters (the bias
    # gradient only its output's shape); one of them is in every joint set
    p, tensors = parts[0] if 0 in parts else parts[1]
    dy = tensors[0]
    w = parts[0][1][1] if 0 in parts else unread(
        dy, (p["K"], p["R"], p["S"], p["C"]) if nhwc else (p["K"], p["C"], p["R"], p["S"]))
    x = parts[1][1][1] if 1 in parts else unread(
        dy, (p["N"], p["H"], p["W"], p["C"]) if nhwc else (p["N"], p["C"], p["H"], p["W"]))
    if nhwc:  # memory-order tensors: torch gets their NCHW views (channels_last strides)
        dy, x, w = (t.permute(*TO_NCHW) for t in (dy, x, w))
    return lambda: conv2d_backward(dy, x, w, p["stride"], p["pad"], mask[2], mask)


def _layer_norm(parts, mask) -> Callable:
    import torch

    from .workloads import layer_norm_backward

    first = parts[0] if 0 in parts else parts[1]
    dy, x, mean, rstd = first[1][:4]
    like = dict(dtype=x.dtype, device=x.device)
    gamma = parts[0][1][4] if 0 in parts else torch.ones(x.shape[-1], **like)
    beta = torch.zeros(x.shape[-1], **like) if mask[2] else None
    return lambda: layer_norm_backward(dy, x, mean, rstd, gamma, mask, beta)


def member_specs(model_ops, tasks, group) -> list:
    """(workload, params, input specs as (shape, dtype name) pairs) of each task of a
    sibling group (`sibling_groups`): what torch's one call for it is made of, wherever
    it is timed (`baseline.joint_twin`)."""
    return [(model_ops.ops[i].workload, dict(model_ops.ops[i].params),
             [(tuple(s.shape), s.dtype) for s in tasks[i].inputs]) for i in group]
