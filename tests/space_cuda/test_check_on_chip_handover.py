"""`check` refuses on-chip memory handed from one kernel to another: a producer set to
shared scope but bound to its own grid lowers to a shared buffer allocated outside both
kernels, which no GPU can run (shared memory ends with its kernel). The same producer
computed inside the consumer's kernel is accepted."""
from __future__ import annotations

import pytest


def _two_stage(scope_kernels: bool):
    import tvm
    from tvm import s_tir, te

    a = te.placeholder((256,), name="A")
    b = te.compute((256,), lambda i: a[i] + 1.0, name="B")
    c = te.compute((256,), lambda i: b[i] * 2.0, name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, c])}))
    blk_b, blk_c = sch.get_sblock("B"), sch.get_sblock("C")
    sch.set_scope(blk_b, 0, "shared")
    (i,) = sch.get_loops(blk_c)
    io, ii = sch.split(i, [2, 128])
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.x")
    if scope_kernels:            # B its own kernel: the handover
        (j,) = sch.get_loops(blk_b)
        jo, ji = sch.split(j, [2, 128])
        sch.bind(jo, "blockIdx.x")
        sch.bind(ji, "threadIdx.x")
    else:                        # B computed inside C's kernel, per thread block
        sch.compute_at(blk_b, io)
        (j,) = sch.get_loops(blk_b)[-1:]
        sch.bind(j, "threadIdx.x")
    return sch.mod


@pytest.mark.parametrize("handover", [True, False])
def test_shared_memory_across_kernels_is_refused(cuda_target, handover):
    from search_space.cuda.limits import check_module

    reason = check_module(_two_stage(handover), cuda_target)
    if handover:
        assert reason == ("kernel 0 uses B_shared in on-chip memory that it does not "
                          "allocate: shared and local memory live only as long as their "
                          "kernel, so another kernel cannot hand them over")
    else:
        assert reason is None
