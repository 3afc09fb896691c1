"""The CUDA lowering the limit check reads: the prefix of the build's passes that turns
a scheduled module into per-kernel TIR without splitting host and device code, and the
kernel launches in its result."""
from __future__ import annotations


def is_kernel_launch(node) -> bool:
    """A `thread_extent` attribute: where a kernel's grid or block dimension is bound."""
    from tvm import tirx

    return isinstance(node, tirx.AttrStmt) and str(node.attr_key) == "thread_extent"


def kernel_roots(stmt) -> list:
    """The outermost `thread_extent` attributes: one per kernel of a lowered function."""
    from tvm import tirx

    roots, stack = [], [stmt]
    while stack:
        node = stack.pop()
        if is_kernel_launch(node):
            roots.append(node)
        elif isinstance(node, tirx.SeqStmt):
            stack.extend(reversed(list(node.seq)))
        elif isinstance(node, tirx.IfThenElse):
            stack.extend(s for s in (node.else_case, node.then_case) if s is not None)
        elif isinstance(node, (tirx.For, tirx.AttrStmt, tirx.While)):
            stack.append(node.body)
    return roots


def lowering_passes() -> list:
    """The default CUDA lowering up to (not including) the host/device split: after
    these the function still holds every kernel with its launch attributes, shared
    allocations and vector accesses, which is what the limits are checked on."""
    from tvm import s_tir, tirx

    st, tx = s_tir.transform, tirx.transform
    return [
        st.CanonicalizeLoop(), st.LowerCrossThreadReduction(), st.LowerInitBlock(),
        st.PlanAndUpdateBufferAllocationLocation(), st.ConvertBlocksToOpaque(),
        st.LiftThreadBinding(), st.ManifestSharedMemoryLocalStage(),
        st.CompactBufferAllocation(), st.LowerAutoCopy(), st.UnifyThreadBinding(),
        st.LowerMatchBuffer(), st.StmtSimplify(), st.InjectPermutedLayout(),
        st.AnnotateIrregularLoop(), st.InjectSoftwarePipeline(),
        st.TransformMmaBufferLayout(), st.LowerOpaqueBlock(), tx.FlattenBuffer(),
        tx.BF16ComputeLegalize(), tx.NarrowDataType(32), st.LoopPartition(),
        tx.VectorizeLoop(True), st.InjectVirtualThread(), st.InjectDoubleBuffer(),
        tx.StorageRewrite(), tx.UnrollLoop(), tx.StmtSimplify(), tx.RemoveNoOp(),
        tx.VerifyMemory(), st.ThreadSync("shared"), st.LowerThreadAllreduce(),
        st.MergeSharedMemoryAllocations(),
    ]


def lower_for_check(mod, tvm_target):
    """`mod["main"]` lowered with `lowering_passes()` under `tvm_target`."""
    import tvm

    func = mod["main"].with_attr("target", tvm_target)
    lowered = tvm.ir.transform.Sequential(lowering_passes())(tvm.IRModule({"main": func}))
    return lowered["main"]
