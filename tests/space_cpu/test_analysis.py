"""Block analysis: what each block of the example operators is, found without names."""
from __future__ import annotations

import pytest

from search_space.analysis import analyse, loop_kinds
from search_space.blocks import blocks
from search_space.cpu.lanes import vector_lanes
from search_space.cpu.packing import find_pack_plan, packed_index

from support.cpu_cases import small_task


def _infos(case):
    from tvm import s_tir

    sch = s_tir.Schedule(small_task(case).mod)
    return sch, [analyse(sch, b) for b in blocks(sch)]


def test_conv_blocks():
    _, (pad, conv) = _infos("conv2d")
    assert pad.is_elementwise and not pad.is_reduction and not pad.is_output
    assert conv.is_contraction and conv.is_output and conv.loops_bound
    assert [v.kind for v in conv.iters] == ["S"] * 4 + ["R"] * 3
    assert {a.buffer for a in conv.reused_reads()} == {"pad", "weight"}


def test_depthwise_reuses_only_the_weight():
    sch, (_, dw) = _infos("depthwise_conv2d")
    assert dw.is_contraction
    assert [a.buffer for a in dw.reused_reads()] == ["weight"]
    # a vector over channels would gather the input: nothing worth packing
    from search_space.analysis import param_buffers

    assert find_pack_plan(dw, param_buffers(sch)) is None
    assert dw.streams("v_x") and not dw.streams("v_ch")


def test_dense_has_no_streaming_axis_unpacked():
    _, (dense, _) = _infos("dense_gelu")
    assert not dense.streams("v_j") and not dense.streams("v_i")
    assert dense.streams("v_j", frozenset(["w"]))


@pytest.mark.parametrize("case,kinds", [
    ("softmax", ["row", "map", "row", "map"]),
    ("layer_norm", ["row", "map", "row", "map", "map"]),
])
def test_row_reductions(case, kinds):
    _, infos = _infos(case)
    got = ["row" if i.is_row_reduction else "map" if i.is_elementwise else "?" for i in infos]
    assert got == kinds
    assert [i.is_output for i in infos] == [False] * (len(infos) - 1) + [True]


def test_access_dimensions():
    _, (mm,) = _infos("matmul")
    a, b = mm.reads
    assert (a.buffer, a.exact) == ("A", ("v_i", "v_k"))
    assert (b.buffer, b.dim_of("v_j"), b.dim_of("v_i")) == ("B", 1, None)


def test_loop_kinds_follow_the_iter_vars():
    sch, (_, conv) = _infos("conv2d")
    assert loop_kinds(sch, sch.get_sblock(conv.name)) == ["S"] * 4 + ["R"] * 3


@pytest.mark.parametrize("case,buffer,dim,var,index,packed", [
    # B[k, j] -> B[j // 4, k, j % 4]
    ("matmul", "B", 1, "v_j", (5, 14), (3, 5, 2)),
    # w[j, k] -> w[j // 4, k, j % 4]
    ("dense_gelu", "w", 0, "v_j", (14, 5), (3, 5, 2)),
    # B[b, k, j] -> B[b, j // 4, k, j % 4]
    ("batch_matmul", "B", 2, "v_j", (1, 5, 14), (1, 3, 5, 2)),
    # weight[f, c, r, s] -> weight[f // 4, c, r, s, f % 4]
    ("conv2d", "weight", 0, "v_f", (14, 5, 2, 1), (3, 5, 2, 1, 2)),
])
def test_pack_plans(case, buffer, dim, var, index, packed):
    from search_space.analysis import param_buffers

    sch, infos = _infos(case)
    info = next(i for i in infos if i.is_contraction)
    plan = find_pack_plan(info, param_buffers(sch))
    assert (plan.buffer, plan.dim, plan.iter) == (buffer, dim, var)
    assert packed_index(plan, len(index), 4)(*index) == packed


def test_vector_lanes_follow_the_target():
    from autosched.target import resolve_target

    avx512 = resolve_target('{"kind": "llvm", "mcpu": "skylake-avx512"}')
    sse = resolve_target('{"kind": "llvm", "mcpu": "x86-64"}')
    assert vector_lanes(avx512, "float32") == 16
    assert vector_lanes(avx512, "float64") == 8
    assert vector_lanes(sse, "float32") == 4


def test_padding_is_conditional_and_kept_out_of_vector_loads(target):
    from search_space.analysis import computes_conditionally

    from support.cpu_cases import small_space

    sch, (pad, _) = _infos("conv2d")
    assert computes_conditionally(sch, sch.get_sblock(pad.name))
    sch, infos = _infos("softmax")
    assert not any(computes_conditionally(sch, sch.get_sblock(i.name)) for i in infos)
    space = small_space("conv2d", target)
    # vectorised along x the padding branch would sit in every load: not inlined;
    # vectorised along output channels the padded value is a broadcast: offered
    assert space.sketches["tile"].inline == ()
    assert space.sketches["tile_pack"].inline == ("pad",)
