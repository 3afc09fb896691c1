"""The micro-kernel sketch: offered for contractions only, register tiles that fit the
vector registers, outputs equal to the references on square, odd and batched shapes
with epilogues, candidates reproducible from a seed, no spills in the hot loop."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

from support.cpu_cases import ROOT, inputs_for, reference, run_module, small_space, small_task

GENERIC = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "generic_ops.py")


def _task(path, name, args=()):
    import autosched

    (task,) = autosched.load_tasks(path, [name], list(args))
    return task


def _example(name, workload, args):
    return _task(os.path.join(ROOT, "examples", name), workload, args)


@pytest.mark.parametrize("case,offered", [
    ("matmul", True), ("batch_matmul", True), ("dense_gelu", True), ("conv2d", True),
    ("softmax", False), ("layer_norm", False), ("depthwise_conv2d", False)])
def test_offered_for_contractions_with_a_packable_operand(case, offered, target):
    assert ("microkernel" in small_space(case, target).sketches) is offered


def _check(task, target, samples: int, seed: int = 0, want=None):
    from search_space import generate_space

    space = generate_space(task, target)
    args = inputs_for(task, seed=1)
    if want is None:
        want = run_module(task.mod, target, args, task.outputs[-1])
    rng = random.Random(seed)
    tiles = set()
    for _ in range(samples):
        cand, mod = space.sample(rng, "microkernel")
        got = run_module(mod, target, args, task.outputs[-1])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=cand.dumps())
        tiles.add(next(v for k, v in cand.values().items() if k.endswith("register_tile")))
    return tiles


@pytest.mark.parametrize("case", ["matmul", "batch_matmul", "dense_gelu", "conv2d"])
def test_small_examples_equal_numpy(case, target):
    task = small_task(case)
    args = inputs_for(task, seed=1)
    _check(task, target, 3, want=reference(case, args))


@pytest.mark.parametrize("shape", [(37, 53, 71), (5, 16, 9), (64, 40, 48)])
def test_odd_matmuls_are_padded_to_whole_tiles(shape, target):
    m, n, k = shape
    task = _example("matmul.py", "matmul", [f"M={m}", f"N={n}", f"K={k}"])
    args = inputs_for(task, seed=1)
    _check(task, target, 3, want=args[0] @ args[1])


def test_large_odd_and_batched_shapes(target):
    task = _example("matmul.py", "matmul", ["M=777", "N=1000", "K=64"])
    args = inputs_for(task, seed=1)
    _check(task, target, 2, want=args[0] @ args[1])
    task = _example("batch_matmul.py", "batch_matmul", ["B=3", "M=45", "N=70", "K=33"])
    args = inputs_for(task, seed=1)
    _check(task, target, 2, want=np.matmul(args[0], args[1]))


@pytest.mark.parametrize("name", ["matmul_bias_relu", "conv_relu", "two_matmuls"])
def test_epilogues_and_chains(name, target):
    _check(_task(GENERIC, name), target, 2, seed=3)


def test_epilogue_is_fused_on_the_register_tile(target):
    """matmul -> +bias -> relu: one stage behind the tile, the tile a local buffer."""
    from search_space import generate_space

    space = generate_space(_task(GENERIC, "matmul_bias_relu", ["M=32", "N=64"]), target)
    for seed in range(6):
        cand, mod = space.sample(random.Random(seed), "microkernel")
        text = mod.script()
        if "_pad" not in text:  # a tile that divides the shape: nothing padded
            break
    assert 'T.sblock("d")' in text and 'T.sblock("e")' not in text
    assert 'scope="local"' in text and "C_local" not in text


def test_register_tiles_fit_the_registers(target):
    from search_space.cpu.common import CpuParams
    from search_space.cpu.microkernel import register_tiles

    plan = small_space("matmul", target).sketches["microkernel"].plans[0]
    for params in (CpuParams(lanes=8, cores=2, registers=16),
                   CpuParams(lanes=16, cores=2, registers=32)):
        tiles = register_tiles(plan, params)
        assert tiles
        for mr, nr in tiles:
            vectors = nr // params.lanes
            assert nr % params.lanes == 0 and mr * vectors + vectors + 1 <= params.registers
            assert mr * vectors >= params.registers * 3 // 8
    avx2 = register_tiles(plan, CpuParams(lanes=8, cores=2, registers=16))
    assert (4, 16) in avx2 and (8, 8) in avx2 and (16, 8) not in avx2  # 64 = M, no padding


def test_candidates_are_deterministic_per_seed(target):
    space = small_space("matmul", target)
    first = [space.sample(random.Random(11), "microkernel") for _ in range(2)]
    assert first[0][0] == first[1][0]
    assert first[0][1].script() == first[1][1].script()
    again = space.apply(first[0][0])
    assert again.script() == first[0][1].script()


def _accumulators(tile, lanes):
    return tile[0] * tile[1] // lanes


def test_hot_loop_of_a_register_tile_has_no_spills(target):
    """The micro-kernel's reduction loop, with a register tile that leaves the
    compiler half the registers, holds the tile's FMAs and touches no stack."""
    from tvm import s_tir

    from autosched.measure.asm import hot_loop, kernel_asm
    from search_space import Decider, generate_space
    from search_space.cpu.microkernel import register_tiles

    task = _example("matmul.py", "matmul", ["M=128", "N=128", "K=64"])
    sketch = generate_space(task, target).sketches["microkernel"]
    lanes, regs = sketch.params.lanes, sketch.params.registers
    tiles = [t for t in register_tiles(sketch.plans[0], sketch.params)
             if _accumulators(t, lanes) <= regs // 2]
    mr, nr = max(tiles, key=lambda t: (_accumulators(t, lanes), t[1]))
    for pack_rows in (False, True):
        sch = s_tir.Schedule(task.mod)
        fixed = {"C.register_tile": (mr, nr), "C.k_unroll": 4, "C.pack_rows": pack_rows}
        sketch.apply(sch, Decider(fixed, rng=random.Random(0), strict=False))
        loop = hot_loop(kernel_asm(sch.mod, target))
        assert loop is not None and loop.fmas >= mr * nr // lanes
        assert loop.spills == 0, loop


def test_every_offered_register_tile_stays_in_registers(target):
    """Every tile the rule offers, three-register-wide ones included (N = 192 is a
    whole number of 3-vector tiles on AVX2 and AVX-512), keeps its accumulators in
    registers: the NR axis is vectorised one register at a time."""
    from tvm import s_tir

    from autosched.measure.asm import hot_loop, kernel_asm
    from search_space import Decider, generate_space
    from search_space.cpu.microkernel import register_tiles

    task = _example("matmul.py", "matmul", ["M=96", "N=192", "K=64"])
    sketch = generate_space(task, target).sketches["microkernel"]
    lanes = sketch.params.lanes
    tiles = register_tiles(sketch.plans[0], sketch.params)
    assert any(nr == 3 * lanes for _, nr in tiles), tiles
    for mr, nr in tiles:
        sch = s_tir.Schedule(task.mod)
        fixed = {"C.register_tile": (mr, nr), "C.k_unroll": 4, "C.pack_rows": False}
        sketch.apply(sch, Decider(fixed, rng=random.Random(0), strict=False))
        loop = hot_loop(kernel_asm(sch.mod, target))
        assert loop is not None and loop.fmas >= mr * nr // lanes, (mr, nr, loop)
        assert loop.spills == 0, (mr, nr, loop)


def test_a_register_tile_too_big_for_the_registers_spills(target):
    """A hand-made 16 x (8 vectors) accumulator tile: 128 vectors cannot stay in
    registers, and the counter sees the stack traffic in the hot loop."""
    import tvm
    from tvm import s_tir, te

    from autosched.measure.asm import hot_loop, kernel_asm
    from search_space.cpu.lanes import vector_lanes

    nr = 8 * vector_lanes(target)
    a, b = te.placeholder((32, 64), name="A"), te.placeholder((64, nr), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((32, nr), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b, c])}))
    block = sch.get_sblock("C")
    local = sch.cache_write(block, 0, "local")
    i, j, r = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 16])
    sch.reorder(i0, r, i1, j)
    sch.reverse_compute_at(local, i0)
    sch.unroll(i1)
    sch.vectorize(j)
    sch.decompose_reduction(block, r)
    loop = hot_loop(kernel_asm(sch.mod, target))
    assert loop is not None and loop.spills > 0, loop


def test_spill_counter_on_known_assembly():
    """Stack operands inside the innermost FMA loop are counted as loads / stores."""
    from autosched.measure.asm import hot_loop, innermost_loops

    asm = "\n".join([
        "f:", "\tpushq %rbp", "\tmovq %rsp, %rbp",
        ".LBB0_1:", "\tvmovups (%rdi), %zmm1",
        ".LBB0_2:",
        "\tvbroadcastss (%rsi,%rax,4), %zmm0",
        "\tvfmadd231ps %zmm1, %zmm0, %zmm2",
        "\tvfmadd231ps -64(%rbp), %zmm0, %zmm3",
        "\tvmovups %zmm3, -128(%rsp)",
        "\tvmovups 64(%rsp), %zmm4",
        "\taddq $1, %rax", "\tcmpq %rcx, %rax", "\tjne .LBB0_2",
        "\tjmp .LBB0_1",
        "g:", ".LBB1_1:", "\tvmovups %zmm0, (%rbp,%rax)", "\tvfmadd213ps %zmm1, %zmm2, %zmm3",
        "\tjne .LBB1_1",
        # an epilogue's polynomial: more FMAs, but only constants broadcast
        "h:", ".LBB2_1:", "\tvbroadcastss .LCPI2_0(%rip), %zmm5",
        "\tvfmadd213ps .LCPI2_1(%rip){1to16}, %zmm5, %zmm6",
        *["\tvfmadd213ps %zmm5, %zmm6, %zmm7"] * 3, "\tvbroadcastss %xmm1, %zmm8",
        "\tjne .LBB2_1",
    ])
    loops = innermost_loops(asm)
    assert [(lp.function, lp.label, lp.fmas, lp.data_broadcasts) for lp in loops] == [
        ("f", ".LBB0_2", 2, 1), ("g", ".LBB1_1", 1, 0), ("h", ".LBB2_1", 4, 0)]
    loop = hot_loop(asm)
    assert (loop.function, loop.fmas, loop.stack_loads, loop.stack_stores) == ("f", 2, 2, 1)
    # without a frame pointer set up, %rbp is a data pointer, not the stack
    assert innermost_loops(asm)[1].spills == 0
    # with no loop broadcasting data, the most FMAs
    assert hot_loop(asm[asm.index("\ng:"):]).function == "h"


CONTRACTIONS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                            "contraction_ops.py")
# Grouped convolutions get the kernel through their group-split form (the group an
# axis of its own, see test_group_split.py), transposed ones through their polyphase
# form (test_polyphase.py): every user contraction here runs on it.
OFFERED = ["attention_scores", "conv1d", "conv1d_grouped", "conv1d_transposed",
           "conv1d_upsampled", "conv2d_dilated", "conv2d_grouped", "conv2d_nhwc",
           "conv2d_strided", "conv2d_transposed", "conv2d_transposed_bias_relu", "conv3d",
           "conv_bn_relu", "dense_relu"]


def test_which_user_contractions_get_the_kernel(target):
    import autosched
    from search_space import generate_space

    got = sorted(t.workload for t in autosched.load_tasks(CONTRACTIONS)
                 if "microkernel" in generate_space(t, target).sketches)
    assert got == OFFERED


@pytest.mark.parametrize("name", OFFERED)
def test_user_contractions_equal_the_unscheduled_program(name, target):
    _check(_task(CONTRACTIONS, name), target, 2, seed=5)


def test_a_grouped_convolution_of_one_group_gets_the_kernel(target):
    """Written for any number of groups, the data's channel index is
    f // (F / G) * (C / G) + c: with G = 1 it does not depend on f over f's range, the
    analysis sees a plain convolution, and the kernel computes it exactly."""
    from search_space import generate_space

    task = _task(CONTRACTIONS, "conv2d_grouped", ["G=1"])
    assert "microkernel" in generate_space(task, target).sketches
    _check(task, target, 2, seed=3)


def test_grouped_convolutions_run_on_the_kernel_of_their_split_form(target):
    """More groups and more samples than the user-contraction check: every candidate
    schedules the group-split form and equals the unscheduled task."""
    from search_space import generate_space

    task = _task(CONTRACTIONS, "conv2d_grouped", ["C=24", "F=64", "G=4", "H=9", "W=12"])
    sketch = generate_space(task, target).sketches["microkernel"]
    assert sketch.form == "grouped" and sketch.program(task.func, None) is not task.func
    assert sketch.program(task.func, None) is sketch.program(task.func, None)
    _check(task, target, 4, seed=7)
