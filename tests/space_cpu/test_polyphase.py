"""The polyphase form of transposed convolutions: found by analysis on the forms users
write, exactly the task's results, 1 / S of the multiply-adds per strided axis, and
the micro-kernel's form for them."""
from __future__ import annotations

import os

import numpy as np
import pytest

from search_space.analysis import analyse
from search_space.blocks import blocks
from search_space.cpu.polyphase import polyphase_form

from support.cpu_cases import ROOT, inputs_for, run_module

CONTRACTIONS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                            "contraction_ops.py")
CONV_NORM = os.path.join(ROOT, "examples", "conv_norm_ops.py")


def _task(path, name, args=()):
    import autosched

    (task,) = autosched.load_tasks(path, [name], list(args))
    return task


def _infos(func):
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    return [analyse(sch, b) for b in blocks(sch)]


def _terms(info) -> int:
    out = 1
    for v in info.iters:
        out *= v.extent
    return out


def _remainders_over_taps(func, name) -> list:
    """The `% S` terms of block `name` that vary with a reduction var: in the
    polyphase form every multiply-add meets data, so no tap is tested for its phase."""
    from search_space.tir import free_vars, iter_nodes

    block = next(n for n in iter_nodes(func.body)
                 if type(n).__name__ == "SBlock" and n.name_hint == name)
    taps = {iv.var.name for iv in block.iter_vars if int(iv.iter_type) == 2}
    return [n for n in iter_nodes(block.body) if type(n).__name__ == "FloorMod"
            and taps & {v.name for v in free_vars(n)}]


TRANSPOSED = [
    (CONTRACTIONS, "conv2d_transposed", (), 2 * 2),   # topi: dilate, pad, kernel flip
    (CONTRACTIONS, "conv1d_transposed", (), 3),       # topi, stride 3
    (CONV_NORM, "conv2d_transpose", ("H=6", "W=5", "C=4", "F=16"), 2 * 2),  # by hand
]


@pytest.mark.parametrize("path,name,args,fewer", TRANSPOSED)
def test_the_form_has_one_contraction_with_fewer_terms_and_an_interleaving_copy(
        path, name, args, fewer):
    task = _task(path, name, args)
    before = [i for i in _infos(task.func) if i.is_contraction]
    after = _infos(polyphase_form(task.func))
    (conv,) = [i for i in after if i.is_contraction]
    assert _terms(before[0]) == fewer * _terms(conv)
    assert not _remainders_over_taps(polyphase_form(task.func), conv.name)
    assert len(after) == 2
    (copy,) = [i for i in after if not i.is_contraction]
    assert copy.is_output and copy.is_spatial and not conv.is_output


@pytest.mark.parametrize("path,name,args,fewer", TRANSPOSED)
def test_the_form_computes_exactly_the_task(path, name, args, fewer, target):
    import tvm

    task = _task(path, name, args)
    inputs = inputs_for(task, seed=4)
    want = run_module(task.mod, target, inputs, task.outputs[-1])
    got = run_module(tvm.IRModule({"main": polyphase_form(task.func)}), target, inputs,
                     task.outputs[-1])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path,name,args", [
    (CONTRACTIONS, "conv1d_transposed", ("R=5",)),    # 5 taps, stride 3: phases differ
    (CONTRACTIONS, "conv2d_strided", ()),             # a strided conv reads data densely
    (CONTRACTIONS, "conv2d_dilated", ()),
    (CONTRACTIONS, "conv1d_upsampled", ()),           # (x + k) // 2, but no zero taps
    (CONV_NORM, "conv2d_general", ("groups=2",))])
def test_no_form_where_the_phases_are_not_whole(path, name, args):
    assert polyphase_form(_task(path, name, args).func) is None


@pytest.mark.parametrize("name,args", [("conv2d_transposed", ("F=32",)),
                                       ("conv1d_transposed", ("F=32", "C=12")),
                                       ("conv2d_transposed_bias_relu", ())])
def test_the_micro_kernel_schedules_the_form(name, args, target):
    import random

    from search_space import generate_space

    task = _task(CONTRACTIONS, name, args)
    space = generate_space(task, target)
    assert space.sketches["microkernel"].form == "polyphase"
    inputs = inputs_for(task, seed=1)
    want = run_module(task.mod, target, inputs, task.outputs[-1])
    rng = random.Random(3)
    for _ in range(3):
        cand, mod = space.sample(rng, "microkernel")
        got = run_module(mod, target, inputs, task.outputs[-1])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=cand.dumps())
