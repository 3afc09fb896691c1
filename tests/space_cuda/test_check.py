"""`check` names the limit a scheduled module breaks, in words, and never crashes."""
from __future__ import annotations

import pytest


def _target(base, **overrides):
    from autosched.target import TargetSpec

    return TargetSpec("cuda", dict(base.config, **overrides), base.fingerprint, False)


def _bind_flat(task, block: str, threads: int):
    """A hand-made schedule: the block's spatial loops fused and split by `threads`."""
    from tvm import s_tir

    sch = s_tir.Schedule(task.mod)
    b = sch.get_sblock(block)
    loops = sch.get_loops(b)
    fused = sch.fuse(*loops[:2])
    bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


def test_too_many_threads(tasks, cuda_target):
    from tvm.s_tir.analysis import verify_gpu_code

    from search_space.cuda import RULES
    from search_space.cuda.lowering import lower_for_check
    from search_space.cuda.limits import GpuLimits

    mod = _bind_flat(tasks["matmul"], "C", 2048).mod
    assert RULES.check(mod, cuda_target) == (
        "kernel 0 uses 2048 threads per block (threadIdx.x=2048); the target allows 1024")
    # TVM's own verifier agrees with the same limits (so the constraint keys are right)
    limits = GpuLimits.of(cuda_target).verify_gpu_code_constraints()
    func = lower_for_check(mod, cuda_target.tvm())
    assert verify_gpu_code(func, limits) is False
    assert verify_gpu_code(lower_for_check(_bind_flat(tasks["matmul"], "C", 1024).mod,
                                           cuda_target.tvm()), limits) is True


def test_tighter_target_rejects_a_valid_candidate(space_of, distinct_samples, cuda_target):
    """A candidate that fits sm_90's limits is checked again under smaller ones."""
    space = space_of("matmul")
    for cand, mod in distinct_samples(space, 8, seed=3, sketch="tile"):
        assert space.rules.check(mod, cuda_target) is None
        threads = 1
        for name, value in cand.values().items():
            if name.endswith(".threads"):
                threads *= value
        small = _target(cuda_target, max_num_threads=max(1, threads // 2))
        reason = space.rules.check(mod, small)
        assert reason.startswith(f"kernel 0 uses {threads} threads per block"), reason
        assert reason.endswith(f"the target allows {max(1, threads // 2)}")


def test_shared_memory_limit(space_of, distinct_samples, cuda_target):
    space = space_of("conv2d")
    (cand, mod), = distinct_samples(space, 1, seed=9, sketch="tile")
    reason = space.rules.check(mod, _target(cuda_target, max_shared_memory_per_block=64))
    assert "bytes of shared memory per block; the target allows 64" in reason


def test_shared_bytes_match_tvm_allocation_count(space_of, distinct_samples, cuda_target):
    from tvm.s_tir.analysis import calculate_allocated_bytes

    from search_space.cuda.lowering import lower_for_check
    from search_space.cuda.limits import kernel_usage

    for workload in ("matmul", "depthwise_conv2d"):
        for _, mod in distinct_samples(space_of(workload), 4, seed=6, sketch="tile"):
            func = lower_for_check(mod, cuda_target.tvm())
            (use,) = kernel_usage(func)
            assert use.shared_bytes == int(calculate_allocated_bytes(func)["main"]["shared"])


def test_unbound_blocks_are_named(tasks, cuda_target):
    from search_space.cuda import RULES

    assert RULES.check(tasks["softmax"].mod, cuda_target) == (
        "blocks exp, row_max, row_sum, softmax are not bound to GPU threads "
        "(would run on the host)")
    partial = _bind_flat(tasks["softmax"], "softmax", 256).mod
    assert RULES.check(partial, cuda_target) == (
        "blocks exp, row_max, row_sum are not bound to GPU threads (would run on the host)")


def test_global_buffer_inside_a_kernel(tasks, cuda_target):
    """A row result computed inside the output kernel must not stay in global memory."""
    from tvm import s_tir

    from search_space.cuda import RULES

    sch = s_tir.Schedule(tasks["layer_norm"].mod)
    for name in ("mean", "var"):
        sch.compute_inline(sch.get_sblock(name))
    out = sch.get_sblock("layer_norm")
    i, j = sch.get_loops(out)
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    for name in ("sq", "total"):
        sch.compute_at(sch.get_sblock(name), i)
        sch.bind(sch.get_loops(sch.get_sblock(name))[-1], "threadIdx.x")
    reason = RULES.check(sch.mod, cuda_target)
    assert reason.startswith("kernel 0 allocates") and "in global memory" in reason


def test_too_many_virtual_threads(tasks, cuda_target):
    from tvm import s_tir

    from search_space.cuda import RULES

    sch = s_tir.Schedule(tasks["matmul"].mod)
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    bx, vt, tx = sch.split(sch.fuse(i, j), [None, 16, 128])
    for loop, thread in ((bx, "blockIdx.x"), (vt, "vthread.x"), (tx, "threadIdx.x")):
        sch.bind(loop, thread)
    assert RULES.check(sch.mod, cuda_target) == "16 virtual threads above one block; at most 8"


def test_out_of_space_decisions_are_refused_with_a_reason(space_of, distinct_samples):
    """Decisions forcing 2048 threads are outside the tile sketch's space (thread factors
    are chosen within the block limit), so replay refuses them by name."""
    from search_space import Candidate, InvalidCandidate

    space = space_of("matmul")
    (cand, _), = distinct_samples(space, 1, seed=1, sketch="tile")
    forced = Candidate.make("tile", dict(cand.values(), **{"C.v_i.threads": 64,
                                                             "C.v_j.threads": 32}))
    with pytest.raises(InvalidCandidate, match=r"C\.v_(i|j)\.threads"):
        space.apply(forced)
    forced = Candidate.make("simple", {"C.threads": 2048, "C.unroll": 0})
    with pytest.raises(InvalidCandidate, match=r"C\.threads=2048 does not fit"):
        space.apply(forced)
