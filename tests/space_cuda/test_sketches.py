"""The CUDA sketches: which a task gets, exact replay, JSON, mutation, and the shape of
the kernels they make."""
from __future__ import annotations

import json
import random

import pytest

ALL = ["matmul", "batch_matmul", "conv2d", "depthwise_conv2d", "dense_bias_gelu",
       "softmax", "layer_norm"]


@pytest.mark.parametrize("workload, sketches", [
    ("matmul", {"default", "simple", "tile", "simt_gemm"}),
    ("batch_matmul", {"default", "simple", "tile", "simt_gemm"}),
    ("conv2d", {"default", "simple", "tile", "simt_gemm"}),
    ("depthwise_conv2d", {"default", "simple", "tile"}),
    ("dense_bias_gelu", {"default", "simple", "tile", "simt_gemm"}),
    ("softmax", {"default", "simple", "rows", "rows_fused", "rows_onchip"}),
    ("layer_norm", {"default", "simple", "rows", "rows_fused", "rows_onchip"}),
])
def test_sketches_per_task(space_of, workload, sketches):
    assert set(space_of(workload).sketches) == sketches


@pytest.mark.parametrize("workload", ALL)
def test_replay_is_exact_and_json_round_trips(space_of, distinct_samples, workload):
    from tvm_ffi import structural_equal

    from search_space import Candidate

    space = space_of(workload)
    for sketch in space.sketches:
        samples = distinct_samples(space, 2, seed=7, sketch=sketch)
        # two of each sketch, one of the decision-free default
        assert len(samples) == (1 if sketch == "default" else 2), sketch
        for cand, mod in samples:
            again = Candidate.from_json(json.loads(cand.dumps()))
            assert again == cand and again.key == cand.key
            assert structural_equal(space.apply(again), mod), (sketch, cand.dumps())
        if len(samples) == 2:   # the comparison can tell candidates apart
            assert not structural_equal(samples[0][1], samples[1][1])


def test_default_candidate_has_no_decisions_and_replays(space_of):
    from tvm_ffi import structural_equal

    space = space_of("softmax")
    cand = space.default_candidate()
    assert cand.sketch == "default" and cand.decisions == ()
    assert structural_equal(space.apply(cand), space.apply(cand))
    assert space.check(space.apply(cand)) is None


@pytest.mark.parametrize("workload", ["matmul", "conv2d", "softmax", "dense_bias_gelu"])
def test_mutation_keeps_sketch_and_validity(space_of, distinct_samples, workload):
    from tvm_ffi import structural_equal

    space = space_of(workload)
    rng = random.Random(3)
    mutated = 0
    for cand, _ in distinct_samples(space, 6, seed=11):
        if not cand.decisions:
            continue
        mutant, mod = space.mutate(cand, rng)
        assert mutant.sketch == cand.sketch and mutant != cand
        assert set(mutant.values()) == set(cand.values())
        assert structural_equal(space.apply(mutant), mod)
        assert space.check(mod) is None, mutant.dumps()
        mutated += 1
    # six distinct samples, of which only the decision-free default (drawn at most once;
    # never once the shared space has seen it) cannot mutate
    assert mutated >= 5


def test_decisions_are_named_after_blocks_and_variables(space_of, distinct_samples):
    (cand, _), = distinct_samples(space_of("matmul"), 1, sketch="tile")
    names = set(cand.values())
    assert {"C.v_i.threads", "C.v_j.threads", "C.v_k.tile", "C.A.vector", "C.B.vector",
            "C.unroll"} <= names


def _kernels(mod, target):
    from search_space.cuda.lowering import lower_for_check
    from search_space.cuda.limits import kernel_usage

    return kernel_usage(lower_for_check(mod, target.tvm()))


@pytest.mark.parametrize("workload, sketch, n_kernels", [
    ("conv2d", "tile", 1),            # padding computed inside the shared-memory copy
    ("dense_bias_gelu", "tile", 1),   # bias + GELU folded into the register write-back
    ("softmax", "rows_fused", 1),
    ("softmax", "rows", 3),           # max, sum (exp inlined), output
    ("layer_norm", "rows_fused", 1),
    ("softmax", "default", 4),        # one kernel per block as written
])
def test_kernel_count(space_of, distinct_samples, cuda_target, workload, sketch, n_kernels):
    samples = distinct_samples(space_of(workload), 3, seed=5, sketch=sketch)
    assert len(samples) == (1 if sketch == "default" else 3)
    for _, mod in samples:
        assert len(_kernels(mod, cuda_target)) == n_kernels


@pytest.mark.parametrize("workload", ["matmul", "conv2d", "depthwise_conv2d", "batch_matmul",
                                      "dense_bias_gelu"])
def test_tiles_fit_the_target_by_construction(space_of, distinct_samples, cuda_target, workload):
    """Tile samples stay within threads, shared memory and virtual threads, and stage
    inputs in shared memory with a register accumulator."""
    from search_space.cuda.limits import max_vthreads

    samples = distinct_samples(space_of(workload), 25, seed=1, sketch="tile")
    assert len(samples) == 25
    for cand, mod in samples:
        (k,) = _kernels(mod, cuda_target)
        assert k.threads <= 1024 and 0 < k.shared_bytes <= 49152, cand.dumps()
        assert max_vthreads(mod) <= 8
        assert "local" in mod.script() and "shared" in mod.script()


def test_vector_widths_only_where_aligned(space_of, distinct_samples):
    """The padded conv input is read at an offset (no vector loads); matmul inputs may
    use float2/float4 when the tiles are multiples."""
    conv = distinct_samples(space_of("conv2d"), 15, seed=2, sketch="tile")
    assert len(conv) == 15
    for cand, _ in conv:
        assert cand.values()["conv.pad.vector"] == 1
    widths = {cand.values()["C.A.vector"]
              for cand, _ in distinct_samples(space_of("matmul"), 30, seed=2, sketch="tile")}
    assert widths <= {1, 2, 4} and len(widths) > 1


def test_row_threads_are_warp_multiples(space_of, distinct_samples, cuda_target):
    samples = distinct_samples(space_of("layer_norm"), 6, seed=4, sketch="rows_fused")
    assert len(samples) == 6
    for cand, mod in samples:
        (k,) = _kernels(mod, cuda_target)
        assert k.threads == cand.values()["layer_norm.threads"] and k.threads % 32 == 0
        assert k.extents["blockIdx.x"] == 1024   # one row per thread block
