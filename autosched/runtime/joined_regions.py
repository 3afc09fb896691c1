"""Checkpoint regions that follow a selective region joined to it, under torch.compile.

Each `torch.utils.checkpoint` call is one region of the joint graph AOTAutograd
partitions (node.meta["ac_graph_id"], numbered in forward order). The partitioner saves
the tensor at the boundary of two consecutive checkpointed regions, as eager
checkpointing must: every checkpointed layer keeps its input. After a selective layer
that input is cheap to rebuild: the policy kept the outputs of the compute-heavy ops it
is made from with cheap ones (a residual block's output is a sum and a ReLU of saved
convolution outputs and its own input). So a region that directly follows a selective
region (selective, or a whole-layer recompute), fed by it alone (its inputs are that
region's outputs, or views of them, and graph inputs), gets that region's id: the boundary is
rebuilt in backward instead of kept, and a run of selective layers, ending in at most
one recomputed layer, keeps only its first layer's input and the policy's outputs.
(AOTAutograd's budgeted partitioner saves the same way: at activation_memory_budget 0.8
a BatchNorm conv net keeps its convolution outputs and recomputes every block input.)
A region after a whole-layer recompute is not joined: its boundary would cost that
layer's whole forward, early, its intermediates held through the backward.

The saved bytes fall at the end of the forward; the rebuilt boundaries live from the
start of the backward to their own layer's, so a step's peak falls less.

A region is selective when its policy marks anything MUST_SAVE (PREFER_SAVE is no mark
to the min-cut partitioner: checkpointing.save_compute_heavy_decomposed leaves
batch norms to it that way).

    with joining_selective_regions():     # around the compile: inductor's joint-graph
        compiled(gm, example_inputs)      # passes, and model.graphs.aot_backend's
"""
from __future__ import annotations

import operator

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_custom_graph_passes
from torch.utils.checkpoint import CheckpointPolicy



def join_selective_regions(graph: torch.fx.Graph) -> int:
    """Give every region that directly follows a selective region, and is fed by it
    alone, that region's id (through a run of selective regions, the first one's); the
    number of regions joined."""
    regions: dict[int, list] = {}
    for node in graph.nodes:
        if "ac_graph_id" in node.meta:
            regions.setdefault(node.meta["ac_graph_id"], []).append(node)
    selective = {i for i, nodes in regions.items()
                 if any(n.meta.get("recompute") == CheckpointPolicy.MUST_SAVE
                        for n in nodes)}
    order = sorted(regions)
    joined = {}
    for before, after in zip(order, order[1:]):
        if before in selective and _fed_by(regions[after], before):
            joined[after] = joined.get(before, before)
    for region, into in joined.items():
        for node in regions[region]:
            node.meta["ac_graph_id"] = into
    return len(joined)


def _fed_by(nodes: list, region: int) -> bool:
    """Whether every tensor `nodes` take from outside themselves is a graph input or
    (a view of) an output of `region`: what a layer directly composed with the layer
    before receives. A region fed by work done between the layers (a U-Net's
    concatenation of a skip connection) keeps its input: joined, the partitioner would
    keep that work's inputs instead, and the plan's accounting would not hold."""
    inside = set(nodes)
    for node in nodes:
        for source in node.all_input_nodes:
            while (source not in inside and "ac_graph_id" not in source.meta
                   and _passes_through(source)):
                source = source.all_input_nodes[0]
            if source in inside or source.op == "placeholder":
                continue
            if source.meta.get("ac_graph_id") != region:
                return False
    return True


def _passes_through(node) -> bool:
    """A view of its first input, or an item of a multi-output node."""
    if node.op != "call_function" or not node.all_input_nodes:
        return False
    return node.target is operator.getitem or (
        isinstance(node.target, torch._ops.OpOverload) and node.target.is_view)


class JoinSelectiveRegions(CustomGraphPass):
    """join_selective_regions as an inductor joint-graph pass (cacheable: it has a uuid)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        join_selective_regions(graph)

    def uuid(self) -> str:
        return "autosched.join_selective_regions.v2"


def joining_selective_regions():
    """A context in which compiles join regions to the selective regions before them
    (after the joint post-passes already configured)."""
    import torch._inductor.config as inductor

    passes = tuple(get_custom_graph_passes(inductor.joint_custom_post_pass))
    if any(isinstance(p, JoinSelectiveRegions) for p in passes):
        return inductor.patch({})
    return inductor.patch(joint_custom_post_pass=(*passes, JoinSelectiveRegions()))
