"""The GPU analysis finds the roles of blocks from their iteration structure."""
from __future__ import annotations

import pytest
from tvm import te


def _schedule(task):
    from tvm import s_tir

    return s_tir.Schedule(task.mod)


@pytest.mark.parametrize("workload, tiled, rows, spatial", [
    ("matmul", ("C",), (), ()),
    ("batch_matmul", ("C",), (), ()),
    ("conv2d", ("conv",), (), ("pad",)),
    ("depthwise_conv2d", ("depthwise",), (), ("pad",)),
    ("dense_bias_gelu", ("dense",), (), ()),
    ("softmax", (), ("row_max", "row_sum"), ("exp",)),
    ("layer_norm", (), ("total", "sq"), ("mean", "var")),
])
def test_classify_roles(tasks, workload, tiled, rows, spatial):
    from search_space.cuda.analysis import classify

    roles = classify(_schedule(tasks[workload]))
    assert (roles.tiled, roles.rows, roles.spatial) == (tiled, rows, spatial)


def test_roles_do_not_depend_on_block_names():
    """The same computation under other names gets the same roles."""
    from autosched.workload import WorkloadDef, make_task
    from search_space.cuda.analysis import classify

    def renamed(M=64, N=32, K=16):
        a = te.placeholder((M, K), name="lhs")
        b = te.placeholder((K, N), name="rhs")
        r = te.reduce_axis((0, K), name="q")
        prod = te.compute((M, N), lambda x, y: te.sum(a[x, r] * b[r, y], axis=r), name="zz")
        out = te.compute((M, N), lambda x, y: prod[x, y] * 2.0, name="scaled")
        return a, b, out

    task = make_task(WorkloadDef("renamed", renamed, {"M": 64, "N": 32, "K": 16}), {})
    roles = classify(_schedule(task))
    assert (roles.tiled, roles.rows, roles.spatial, roles.outputs) == (("zz",), (), (), ("scaled",))


def test_loop_kinds_and_positions(tasks):
    from search_space.cuda.analysis import REDUCE, SPATIAL, loop_kinds, loop_positions

    sch = _schedule(tasks["conv2d"])
    conv = sch.get_sblock("conv")
    assert loop_kinds(sch, conv) == [SPATIAL] * 4 + [REDUCE] * 3
    assert loop_positions(sch, conv) == list(range(7))
    i, j = sch.get_loops(sch.get_sblock("pad"))[2:]
    sch.fuse(i, j)
    assert loop_positions(sch, sch.get_sblock("pad"))[-1] is None


def test_footprint_counts_halo_and_both_inputs(tasks):
    """conv tile n=1, f=4, y=2, x=8, c=3, r=3, s=3: pad 1*3*(2+2)*(8+2) + weight 4*3*3*3."""
    from search_space.cuda.analysis import footprint_bytes

    sch = _schedule(tasks["conv2d"])
    conv = sch.get_sblock("conv")
    got = footprint_bytes(sch, conv, {1: 4, 2: 2, 3: 8, 4: 3, 5: 3, 6: 3})
    assert got == 4 * (3 * 4 * 10 + 4 * 3 * 3 * 3)


def test_matmul_footprint(tasks):
    from search_space.cuda.analysis import footprint_bytes

    sch = _schedule(tasks["matmul"])
    c = sch.get_sblock("C")
    assert footprint_bytes(sch, c, {0: 64, 1: 32, 2: 8}) == 4 * (64 * 8 + 8 * 32)


def test_fusion_plan_for_softmax_and_layer_norm(tasks):
    from search_space.cuda.analysis import classify
    from search_space.cuda.common import inline_spatial
    from search_space.cuda.reduction import FusionPlan, fusion_plan

    for workload, out, reds in [("softmax", "softmax", ("row_max", "row_sum")),
                                ("layer_norm", "layer_norm", ("total", "sq"))]:
        sch = _schedule(tasks[workload])
        inline_spatial(sch, classify(sch).spatial)
        assert fusion_plan(sch) == FusionPlan(out, 1, reds)


def test_no_fusion_for_column_reduction():
    """A reduction over the first axis is not indexed by a prefix of the output's loops."""
    from autosched.workload import WorkloadDef, make_task
    from search_space.cuda.reduction import fusion_plan

    def colnorm(M=64, N=32):
        x = te.placeholder((M, N), name="x")
        k = te.reduce_axis((0, M), name="k")
        s = te.compute((N,), lambda j: te.sum(x[k, j], axis=k), name="colsum")
        y = te.compute((M, N), lambda i, j: x[i, j] / s[j], name="y")
        return x, y

    task = make_task(WorkloadDef("colnorm", colnorm, {"M": 64, "N": 32}), {})
    assert fusion_plan(_schedule(task)) is None
