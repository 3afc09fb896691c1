"""Features of scheduled programs: exact values on hand-checked schedules."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cost_model.features import FeatureConfig, decision_vector, extract, feature_names
from cost_model.footprint import interval
from cost_model.ir_walk import walk
from search_space import Candidate


def lg(x):
    return math.log2(1 + x)


def named(task, cand, mod, cfg=FeatureConfig()):
    values = extract(task, cand, mod, cfg)
    names = feature_names(cfg)
    assert len(values) == len(names)
    return dict(zip(names, values))


@pytest.fixture(scope="module")
def tiled(matmul_space):
    cand = Candidate.make("tile", {"i": [2, 4, 2, 16], "j": [4, 2, 2, 16], "k": [32, 8],
                                   "parallel": 1, "vectorize": 1, "unroll": 16,
                                   "cache_write": "none"})
    return cand, matmul_space.apply(cand)


def test_loop_and_vector_features_of_a_known_tiling(matmul_space, tiled):
    f = named(matmul_space.task, *tiled)
    assert f["s0.iters"] == pytest.approx(lg(256 ** 3))
    assert f["s0.flops"] == pytest.approx(lg(2 * 256 ** 3))  # one add, one mul
    assert (f["s0.op_add"], f["s0.op_mul"], f["s0.op_div"]) == (1.0, 1.0, 0.0)
    assert f["s0.loops"] == 9  # i0 and j0 fused
    assert f["s0.parallel"] == 3.0 and f["s0.n_parallel"] == 1  # log2 of 8
    assert f["s0.vector"] == 4.0 and f["s0.vector_contig"] == 1.0  # log2 of 16
    assert f["s0.unroll_auto"] == pytest.approx(lg(16))
    inner = [16, 16, 8, 2, 2, 32]  # j3 i3 k1 j2 i2 k0
    assert [f[f"s0.inner_{i}"] for i in range(6)] == pytest.approx([lg(x) for x in inner])
    assert [f[f"s0.inner_work_{i + 1}"] for i in range(6)] == \
        pytest.approx([lg(math.prod(inner[: i + 1])) for i in range(6)])


def test_vector_odd_marks_vector_lengths_that_are_not_powers_of_two(synthetic):
    """48-wide vector loops (3 AVX-512 registers) measured a median 5.3x slower than the
    best matmul candidate on our CPU; the feature is log2 of the odd factor."""
    space = synthetic.make_space(synthetic.matmul_task(M=64, N=384, K=64))
    odd = {}
    for j3 in (48, 16, 24):
        cand = Candidate.make("tile", {"i": [2, 4, 2, 4], "j": [384 // j3, 1, 1, j3],
                                       "k": [8, 8], "parallel": 1, "vectorize": 1,
                                       "unroll": 0, "cache_write": "none"})
        f = named(space.task, cand, space.apply(cand))
        assert f["s0.vector"] == pytest.approx(math.log2(j3))
        odd[j3] = f["s0.vector_odd"]
    assert odd == pytest.approx({48: math.log2(3), 16: 0.0, 24: math.log2(3)})


def test_strides_footprints_and_traffic_of_a_known_tiling(matmul_space, tiled):
    f = named(matmul_space.task, *tiled)
    # innermost loop j3: C written with stride 1; reads C (1), A (0), B (1)
    assert f["s0.stride_write"] == pytest.approx(1.0)
    assert f["s0.stride_read_mean"] == pytest.approx(2 / 3)
    assert (f["s0.reads_contig"], f["s0.reads_zero"]) == pytest.approx((2 / 3, 1 / 3))
    assert f["s0.fp_total"] == pytest.approx(lg(3 * 256 * 256 * 4))
    assert f["s0.fp_inner_1"] == pytest.approx(lg((1 + 16 + 16) * 4))     # j3 varies
    assert f["s0.fp_inner_2"] == pytest.approx(lg((16 + 16 + 256) * 4))   # i3, j3 vary
    # 32 KiB: loops i2 j2 k1 i3 j3 fit (32x8 + 8x32 + 32x32 floats); 2048 trips above
    traffic_l1 = 2048 * (256 + 256 + 1024) * 4
    assert f["s0.traffic_32k"] == pytest.approx(lg(traffic_l1))
    assert f["s0.intensity_32k"] == pytest.approx(math.log2(2 * 256 ** 3 / traffic_l1))
    # 1 MiB holds all three matrices: compulsory traffic only
    assert f["s0.traffic_1024k"] == pytest.approx(lg(3 * 256 * 256 * 4))
    assert f["s1.iters"] == 0.0 and f["other.n"] == 0  # a single store
    assert f["prog.n_stores"] == 1 and f["prog.task_flops"] == pytest.approx(lg(2 * 256 ** 3))


def test_register_tile_of_a_known_tiling(matmul_space, tiled):
    f = named(matmul_space.task, *tiled)
    # innermost reduction loop k1 (8); inside it i3 (16) x j3 (16, vectorised by 16)
    assert f["s0.reg_tile"] == pytest.approx(lg(16 * 16))
    assert f["s0.reg_accumulators"] == pytest.approx(lg(16))      # 16 vector registers
    assert f["s0.reg_spill"] == 0.0                               # within 32 registers
    assert f["s0.reg_stream"] == pytest.approx(lg(8))             # j2 above k1 is spatial
    # per k step: 16 x 16 outputs x (mul + add) from 16 floats of A and 16 of B
    assert f["s0.reg_intensity"] == pytest.approx(math.log2(16 * 16 * 2 / ((16 + 16) * 4)))
    assert f["s0.reg_stream_footprint"] == pytest.approx(lg((16 * 8 + 8 * 16 + 16 * 16) * 4))
    # auto-unroll 16: the vector loop j3 (16 iterations) is the unrolled body
    assert f["s0.unrolled_body"] == pytest.approx(lg(16))


def test_a_store_without_reduction_has_no_register_tile():
    from tvm import te

    from autosched.workload import WorkloadDef, make_task

    def scale(N=64):
        a = te.placeholder((N, N), name="A")
        return a, te.compute((N, N), lambda i, j: a[i, j] * 2.0, name="B")

    task = make_task(WorkloadDef("scale", scale, {"N": 64}), {"N": 64})
    f = named(task, Candidate("default"), task.mod)
    assert [f[f"s0.{name}"] for name in ("reg_tile", "reg_accumulators", "reg_spill",
                                         "reg_stream", "reg_intensity",
                                         "reg_stream_footprint")] == [0.0] * 6


def test_a_let_bound_value_is_counted_once_with_the_body_that_uses_it():
    from tvm import te, tirx

    def let_square(e):
        v = tirx.Var("v", "float32")
        return tirx.Let(v, e * 2.0, v + v * v)          # 1 mul bound, then 1 add, 1 mul

    a = te.placeholder((16,), name="A")
    b = te.compute((16,), lambda i: let_square(a[i] + 1.0), name="B")
    (store,) = walk(te.create_prim_func([a, b])).stores
    assert store.ops == {"add": 2, "mul": 2}
    assert [acc.buffer.name for acc in store.accesses if not acc.write] == ["A"]


def test_cache_write_adds_a_second_store_slot(matmul_space):
    cand = Candidate.make("tile", {"i": [2, 4, 2, 16], "j": [4, 2, 2, 16], "k": [32, 8],
                                   "parallel": 2, "vectorize": 0, "unroll": 0,
                                   "cache_write": "inner"})
    f = named(matmul_space.task, cand, matmul_space.apply(cand))
    assert f["prog.n_stores"] == 2
    assert f["s1.iters"] == pytest.approx(lg(256 * 256))  # the copy-out of C
    assert f["s0.parallel"] == 6.0  # i0 j0 i1 j1 fused: 2 * 4 * 4 * 2
    assert f["s0.vector"] == 0.0


def test_gpu_thread_and_compacted_memory_features(synthetic):
    from tvm import s_tir

    task = synthetic.matmul_task(128, 128, 128)
    sch = s_tir.Schedule(task.mod)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    i0, i1, i2 = sch.split(i, [8, 4, 4])
    j0, j1, j2 = sch.split(j, [8, 4, 4])
    k0, k1 = sch.split(k, [16, 8])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    for loop, tag in ((i0, "blockIdx.x"), (j0, "blockIdx.y"), (i1, "threadIdx.y"),
                      (j1, "threadIdx.x")):
        sch.bind(loop, tag)
    fetch = sch.cache_read(block, 0, "shared")
    sch.compute_at(fetch, k0)
    # cooperative fetch: the 16x8 tile of A is loaded by the block's 4x4 threads
    _, ty, tx = sch.split(sch.fuse(*sch.get_loops(fetch)[-2:]), [8, 4, 4])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.reverse_compute_at(sch.cache_write(block, 0, "local"), j1)
    f = named(task, None, sch.mod)
    stores = {st.block: st for st in walk(sch.mod["main"]).stores}
    loops = stores["A_shared"].loops
    # the fetch's threadIdx loops are the enclosing ones, not new loops over threads
    assert [lp.tag for lp in loops if lp.tag] == ["blockIdx.x", "blockIdx.y", "threadIdx.y",
                                                  "threadIdx.x"]
    assert math.prod(lp.extent for lp in loops) == 64 * 16 * 16 * 8
    assert (f["s0.blocks"], f["s0.threads"], f["s0.vthreads"]) == (6.0, 4.0, 0.0)
    assert f["s0.scope_local"] == 1.0
    assert f["prog.alloc_shared"] == pytest.approx(lg(16 * 8 * 4))  # A tile per k0 step
    assert f["prog.alloc_local"] == pytest.approx(lg(4 * 4 * 4))    # C tile per thread
    assert f["prog.n_stores"] == 3


def test_decision_features_are_cumulative_tile_sizes():
    cand = Candidate.make("x", {"i": [2, 4, 2, 16], "k": [32, 8], "unroll": 16,
                                "cache_write": "none"})
    v = decision_vector(cand)
    assert len(v) == sum(1 for n in feature_names() if n.startswith("dec."))
    assert v[:4] == [4.0, 5.0, 7.0, 1.0]   # i: 16, 2*16, 4*2*16, outer 2
    assert v[4:8] == [3.0, 8.0, 8.0, 5.0]  # k: 8, 32*8, (two parts), outer 32
    assert v[8:16] == [0.0] * 8
    assert 0.0 <= v[16] < 1.0 and v[17] == pytest.approx(lg(16))


def test_interval_bounds_of_fused_index_expressions():
    fused = ("v", 0)
    assert interval(("%", fused, ("c", 4)), {0: 7}) == (0, 3)
    assert interval(("%", fused, ("c", 4)), {0: 2}) == (0, 2)
    assert interval(("+", ("*", ("//", fused, ("c", 4)), ("c", 64)), ("v", 1)), {0: 7, 1: 3}) \
        == (0, 67)
    assert interval(("-", ("c", 10), ("v", 1)), {1: 3}) == (7, 10)
    assert interval(("+", ("?",), ("c", 1)), {}) is None


def test_features_are_deterministic_and_tell_candidates_apart(matmul_space, measured):
    cands, mods, _ = measured
    task = matmul_space.task
    a = extract(task, cands[0], mods[0])
    assert extract(task, cands[0], matmul_space.apply(cands[0])) == a
    rows = np.array([extract(task, c, m) for c, m in zip(cands[:20], mods[:20])])
    assert np.isfinite(rows).all()
    assert len({tuple(r) for r in rows}) == 20


def test_metaschedule_per_store_group_is_appended(matmul_space, tiled):
    cfg = FeatureConfig(per_store_feature=True)
    ours = extract(matmul_space.task, *tiled)
    both = extract(matmul_space.task, *tiled, cfg)
    assert len(both) == len(feature_names(cfg)) == len(ours) + 2 * 164
    assert both[: len(ours)] == ours
    assert np.isfinite(both).all() and any(x != 0 for x in both[len(ours):])
