"""Selective (per-op) recomputation through a checkpoint policy.

`selective_checkpoint(fn, *args)` runs `fn` under non-reentrant checkpointing with a policy
from `torch.utils.checkpoint.create_selective_checkpoint_contexts`: outputs of
compute-heavy ops (matmuls, convolutions, fused attention, and every autosched custom op)
are saved, or those of them a save rule keeps (save_rules.py: the selective actions
differ in it); everything else (norms, activations, softmax, elementwise, copies) is
recomputed in backward from those and from the layer's inputs.

The outputs the policy saves live in the checkpoint's cache, not in autograd's saved-tensor
slots, so the policy reports each of them to the active memory meters itself.
"""
from __future__ import annotations

import functools
import inspect

import torch
import torch.utils._pytree as pytree
from torch.utils.checkpoint import (CheckpointPolicy, SelectiveCheckpointContext, checkpoint,
                                    create_selective_checkpoint_contexts)

from .meter import report_saved
from .save_rules import keeps
from .trace import (AUTOSCHED_NAMESPACE, BATCH_NORMS, COMPUTE_HEAVY, data_operand,
                    first_tensor, op_name)


def _output_numel(ctx, func, args, kwargs) -> int:
    out = ctx.op_output if POLICY_SEES_OUTPUT else None
    if out is None:   # asked before the op runs (POLICY_SEES_OUTPUT): its shapes, on meta
        out = func(*pytree.tree_map_only(
            torch.Tensor, lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"), args),
            **kwargs)
    return first_tensor(out).numel()


def save_by_rule(rule: str, ctx, func, *args, **kwargs):
    """Policy: keep the outputs of expensive ops that save_rules' `rule` keeps, recompute
    the rest."""
    ns, name = op_name(func)
    if ns == AUTOSCHED_NAMESPACE or name in COMPUTE_HEAVY:
        if rule == "all" or keeps(rule, name, _output_numel(ctx, func, args, kwargs),
                                  data_operand(name, args).numel()):
            return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def save_by_rule_decomposed(rule: str, ctx, func, *args, **kwargs):
    """save_by_rule for a compiler that decomposes batch norms before partitioning
    (inductor): batch norms left to the partitioner.

    A batch norm the policy recomputes is recomputed whole: its statistics' reduction over
    the batch runs again in backward (slower than AOTAutograd's own partitioner keeping
    the same tensors). Left unmarked
    (PREFER_SAVE is no mark to the min-cut partitioner), the partitioner keeps the small
    statistics and recomputes the elementwise part from the saved convolution output.
    A compiler that partitions the batch norm whole would keep its whole output instead,
    and eager checkpointing would too. (Not layer norms: their statistics are per row and
    cheap, and left to it the partitioner keeps a transformer block's normalised outputs
    too, more bytes.)"""
    if op_name(func)[1] in BATCH_NORMS:
        return CheckpointPolicy.PREFER_SAVE
    return save_by_rule(rule, ctx, func, *args, **kwargs)


# the `selective` action's policies: every compute-heavy output kept
save_compute_heavy = functools.partial(save_by_rule, "all")
save_compute_heavy_decomposed = functools.partial(save_by_rule_decomposed, "all")

# torch.compile backends that decompose batch norms before AOTAutograd partitions
DECOMPOSING_BACKENDS = {"inductor", "aot_eager_decomp_partition"}


def eager_policy(rule: str = "all"):
    """The selective policy of an eagerly run layer under save rule `rule`."""
    return functools.partial(save_by_rule, rule)


def compiled_policy(backend, rule: str = "all"):
    """The selective policy for layers compiled by `backend` (a registered name or a
    backend callable) under save rule `rule`."""
    if isinstance(backend, str) and backend in DECOMPOSING_BACKENDS:
        return functools.partial(save_by_rule_decomposed, rule)
    return functools.partial(save_by_rule, rule)


def _reporting(policy):
    @functools.wraps(policy)
    def wrapped(ctx, func, *args, **kwargs):
        decision = policy(ctx, func, *args, **kwargs)
        if decision in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE):
            out = ctx.op_output
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor):
                    report_saved(t)
        return decision
    return wrapped


def _checkpoint_under(policy, fn, *args, **kwargs):
    return checkpoint(fn, *args, use_reentrant=False,
                      context_fn=functools.partial(create_selective_checkpoint_contexts, policy),
                      **kwargs)


# Older torch (2.11) calls the policy before the op runs, with no ctx.op_output: there the
# outputs the policy saved are read from the forward mode's cache once the forward is done.
POLICY_SEES_OUTPUT = "op_output" in inspect.signature(SelectiveCheckpointContext).parameters


def selective_checkpoint(fn, *args, policy=save_compute_heavy, report: bool = True, **kwargs):
    """`fn(*args, **kwargs)` with per-op selective recomputation under `policy`.

    report: tell the active meters what the policy's cache holds (eager runs). Under
    torch.compile the partitioner applies the policy to the graph and the compiled graph
    saves those outputs through autograd's slots, which the meters' hooks see: there
    `report=False`, and the policy must be traceable (it is called on fake tensors).
    """
    if not report:
        return _checkpoint_under(policy, fn, *args, **kwargs)
    if POLICY_SEES_OUTPUT:
        return checkpoint_reporting_outputs(fn, *args, policy=policy, **kwargs)
    return checkpoint_reporting_cache(fn, *args, policy=policy, **kwargs)


def checkpoint_reporting_outputs(fn, *args, policy, **kwargs):
    """Selective checkpointing whose policy reports each output it saves (ctx.op_output)."""
    return _checkpoint_under(_reporting(policy), fn, *args, **kwargs)


def checkpoint_reporting_cache(fn, *args, policy, **kwargs):
    """Selective checkpointing that reports what its cache holds after the forward."""
    modes = []

    def context_fn():
        forward, recompute = create_selective_checkpoint_contexts(policy)
        modes.append(forward)
        return forward, recompute
    out = checkpoint(fn, *args, use_reentrant=False, context_fn=context_fn, **kwargs)
    for mode in modes:
        storage = getattr(mode, "storage", None)
        if storage is None:
            raise RuntimeError("this torch's selective checkpointing keeps its cache where "
                               "autosched cannot count it")
        for leaf in pytree.tree_leaves(list(storage.values())):
            t = getattr(leaf, "val", leaf)      # the cache wraps each output
            if isinstance(t, torch.Tensor):
                report_saved(t)
    return out


def full_checkpoint(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` recomputed entirely in backward (non-reentrant)."""
    return checkpoint(fn, *args, use_reentrant=False, **kwargs)
