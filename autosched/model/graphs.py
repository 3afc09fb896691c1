"""Aten graphs of a model through torch's own machinery: dynamo captures the model,
AOTAutograd turns each captured graph into aten graphs (forward and backward for a
training step, one inference graph under no_grad), and a pass looks at or rewrites each.

Extraction and the torch.compile backend share this, so the graphs that are tuned are the
graphs that run. `scan(gm)` lists the matches of a graph in order; a node fused into an
earlier match (a ReLU epilogue) is not matched again.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .aten_match import OpMatch, is_compute, match, op_name

GRAPH_KINDS = ("forward", "backward", "inference")


@dataclass
class GraphScan:
    """The matches of one aten graph and the computing operators left unmatched."""

    kind: str
    matches: list[OpMatch] = field(default_factory=list)
    uncovered: Counter = field(default_factory=Counter)


def scan(gm, kind: str) -> GraphScan:
    """Every operator call of `gm` that a workload computes, in graph order."""
    result = GraphScan(kind)
    fused = set()
    for node in gm.graph.nodes:
        if node in fused:
            continue
        found = match(node)
        if not found:
            if is_compute(node):
                result.uncovered[op_name(node)] += 1
            continue
        result.matches += found
        fused.update(m.output for m in found if m.output is not node)
    return result


def inductor_graph(gm, example_inputs, kind: str) -> Callable:
    """`gm` compiled by inductor as AOTAutograd would compile it (a boxed callable);
    operators a pass replaced by custom ops stay calls to those ops.

    The graph is traced again through inductor's decompositions first: AOTAutograd made
    it without them so that passes see the operators whole (softmax, layer norm, GELU),
    and inductor lowers only the decomposed forms of those. Random operators (dropout) stay
    aten's own generator calls (`fallback_random`): inductor replaces them by its fused
    generator in a pass over the joint graph, before the split, which these graphs never
    went through; inductor's lowering refuses them otherwise."""
    from contextlib import nullcontext

    from torch._guards import detect_fake_mode
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    with config.patch(fallback_random=True):
        with detect_fake_mode(example_inputs) or nullcontext():
            decomposed = make_fx(gm, decomposition_table=select_decomp_table())(
                *example_inputs)
        return compile_fx_inner(decomposed, example_inputs, is_backward=kind == "backward",
                                is_inference=kind == "inference")


def graph_compiler(name: str) -> Callable:
    """The graph compiler called `name`: "inductor", "eager", or "auto" (inductor where
    it can build, that is where a C++ compiler is on the PATH; eager otherwise)."""
    import shutil

    if name == "auto":
        name = "inductor" if any(shutil.which(c) for c in ("g++", "c++", "clang++")) \
            else "eager"
    compilers = {"inductor": inductor_graph, "eager": eager_graph}
    if name not in compilers:
        raise ValueError(f"unknown graph compiler {name!r}: one of auto, "
                         f"{', '.join(compilers)}")
    return compilers[name]


def eager_graph(gm, example_inputs, kind: str) -> Callable:
    """`gm` run as it is, operator by operator (a boxed callable)."""
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(gm.forward)


def aot_backend(graph_pass: Callable, compile_graph: Callable = eager_graph) -> Callable:
    """A torch.compile backend that runs `graph_pass(gm, kind)` on each aten graph
    AOTAutograd makes of a captured graph, then `compile_graph(gm, example_inputs, kind)`
    on the result (eager aten by default, `inductor_graph` to let inductor fuse the rest).

    The forward and backward are split as inductor splits them, whatever compiles them:
    by the min-cut partitioner, which honours activation checkpointing (whole and
    selective) and `torch._functorch.config.activation_memory_budget`. So the graphs a
    model's operators are extracted from (extract.py) are the graphs the backend later
    rewrites (the split decides, for one, in which layout a backward matmul reads its
    weight). As in inductor, the forward graph itself writes the buffers it updates (batch
    norm's running statistics): written after it returns, the min-cut split's saved
    copies of them would fail autograd's version check in backward. The joint-graph
    post-passes configured for inductor (torch._inductor.config.joint_custom_post_pass,
    such as runtime.joined_regions.JoinSelectiveRegions) run on the joint graph before
    the split, as in inductor."""
    from functools import partial

    from torch._functorch.aot_autograd import aot_module_simplified

    def compiler(kind, gm, example_inputs):
        graph_pass(gm, kind)
        gm.recompile()
        return compile_graph(gm, example_inputs, kind)

    def backend(gm, example_inputs):
        return aot_module_simplified(gm, example_inputs, keep_inference_input_mutations=True,
                                     fw_compiler=partial(compiler, "forward"),
                                     bw_compiler=partial(compiler, "backward"),
                                     inference_compiler=partial(compiler, "inference"),
                                     partition_fn=_partition_after_joint_passes)

    return backend


def _partition_after_joint_passes(joint, joint_inputs, **kwargs):
    """The min-cut split of `joint` after inductor's configured joint post-passes."""
    import torch._inductor.config as inductor
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.custom_graph_pass import get_custom_graph_passes

    passes = get_custom_graph_passes(inductor.joint_custom_post_pass)
    for graph_pass in passes:
        graph_pass(joint.graph)
    if passes:
        joint.recompile()
    return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
