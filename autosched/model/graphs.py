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


def aot_backend(graph_pass: Callable) -> Callable:
    """A torch.compile backend that runs `graph_pass(gm, kind)` on each aten graph
    AOTAutograd makes of a captured graph, then runs the graph as it is (eager aten)."""
    from functools import partial

    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    def compiler(kind, gm, example_inputs):
        graph_pass(gm, kind)
        gm.recompile()
        return make_boxed_func(gm.forward)

    def backend(gm, example_inputs):
        return aot_module_simplified(gm, example_inputs,
                                     fw_compiler=partial(compiler, "forward"),
                                     bw_compiler=partial(compiler, "backward"),
                                     inference_compiler=partial(compiler, "inference"))

    return backend
