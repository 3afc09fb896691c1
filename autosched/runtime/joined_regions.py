"""Consecutive selective-checkpoint regions joined into one region under torch.compile.

Each `torch.utils.checkpoint` call is one region of the joint graph AOTAutograd
partitions (node.meta["ac_graph_id"], numbered in forward order). The partitioner saves
the tensor at the boundary of two consecutive checkpointed regions, as eager
checkpointing must: every selective layer then keeps its input, though a selective
policy keeps the outputs of the compute-heavy ops the input is rebuilt from with cheap
ones (a residual block's input is the previous block's sum and ReLU of saved
convolution outputs). Joined, a run of selective layers keeps only the first layer's
input and the policy's saved outputs; the boundaries are recomputed, each once, in
backward. (AOTAutograd's own budgeted partitioner saves what it saves at
activation_memory_budget = 0.8 the same way.)

A region is selective when its policy saves anything (MUST_SAVE or PREFER_SAVE marks).

    with joining_selective_regions():     # around the compile: inductor's joint-graph
        compiled(gm, example_inputs)      # passes, and model.graphs.aot_backend's
"""
from __future__ import annotations

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_custom_graph_passes
from torch.utils.checkpoint import CheckpointPolicy

SAVED = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)


def join_selective_regions(graph: torch.fx.Graph) -> int:
    """Give every selective region that directly follows another selective region that
    region's id; the number of regions joined."""
    regions: dict[int, list] = {}
    for node in graph.nodes:
        if "ac_graph_id" in node.meta:
            regions.setdefault(node.meta["ac_graph_id"], []).append(node)
    selective = {i for i, nodes in regions.items()
                 if any(n.meta.get("recompute") in SAVED for n in nodes)}
    order = sorted(regions)
    joined = {}
    for before, after in zip(order, order[1:]):
        if before in selective and after in selective:
            joined[after] = joined.get(before, before)
    for region, into in joined.items():
        for node in regions[region]:
            node.meta["ac_graph_id"] = into
    return len(joined)


class JoinSelectiveRegions(CustomGraphPass):
    """join_selective_regions as an inductor joint-graph pass (cacheable: it has a uuid)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        join_selective_regions(graph)

    def uuid(self) -> str:
        return "autosched.join_selective_regions.v1"


def joining_selective_regions():
    """A context in which compiles join consecutive selective regions (after the joint
    post-passes already configured)."""
    import torch._inductor.config as inductor

    passes = tuple(get_custom_graph_passes(inductor.joint_custom_post_pass))
    if any(isinstance(p, JoinSelectiveRegions) for p in passes):
        return inductor.patch({})
    return inductor.patch(joint_custom_post_pass=(*passes, JoinSelectiveRegions()))
