"""The group-split form of grouped contractions: the group becomes an iter var of its
own, the data's channel index stops depending on the vector axis, the weights are
packed group by group, and the form computes exactly what the task computes."""
from __future__ import annotations

import os

import numpy as np
import pytest

from search_space.analysis import analyse
from search_space.blocks import blocks
from search_space.cpu.group_split import group_split
from search_space.cpu.packing import find_pack_plan

from support.cpu_cases import inputs_for, run_module, small_task

CONTRACTIONS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                            "contraction_ops.py")


def _task(name, args=()):
    import autosched

    (task,) = autosched.load_tasks(CONTRACTIONS, [name], list(args))
    return task


def _contraction(func):
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    return next(i for i in (analyse(sch, b) for b in blocks(sch)) if i.is_contraction)


@pytest.mark.parametrize("name,args,groups,per_group", [
    ("conv2d_grouped", (), 2, 16),                       # topi.nn.group_conv2d_nchw
    ("conv2d_grouped", ("C=24", "F=48", "G=4"), 4, 12),
    ("conv1d_grouped", (), 3, 16)])                      # written by hand
def test_the_group_becomes_an_axis_and_the_weights_pack_by_group(name, args, groups,
                                                                  per_group):
    task = _task(name, args)
    before = _contraction(task.func)
    split = _contraction(group_split(task.func))
    assert len(split.iters) == len(before.iters) + 1
    extents = [v.extent for v in split.spatial]
    assert extents[1:3] == [groups, per_group]
    g, f = split.spatial[1].name, split.spatial[2].name
    data = next(a for a in split.reads if a.buffer != "weight")
    weight = next(a for a in split.reads if a.buffer == "weight")
    assert f not in data.iters() and g in data.iters()   # one channel block per group
    assert weight.grouped[0] == (g, f) and weight.panel_dim(f) == 0
    assert weight.dim_of(f) is None                      # not exactly f: g * F/G + f
    plan = find_pack_plan(split, {"data", "weight"})
    assert plan is not None and (plan.buffer, plan.dim, plan.iter) == ("weight", 0, f)


@pytest.mark.parametrize("name,args", [
    ("conv2d_grouped", ("G=1",)),   # one group: f // F is 0 over f's range
    ("conv2d_strided", ()),
    ("attention_scores", ())])
def test_contractions_without_groups_have_no_split_form(name, args):
    assert group_split(_task(name, args).func) is None


def test_depthwise_has_no_split_form():
    """One output channel per group: nothing to vectorise within a group."""
    assert group_split(small_task("depthwise_conv2d").func) is None


@pytest.mark.parametrize("name,args", [("conv2d_grouped", ("C=24", "F=48", "G=4")),
                                       ("conv1d_grouped", ())])
def test_the_split_form_computes_the_same(name, args, target):
    import tvm

    task = _task(name, args)
    inputs = inputs_for(task, seed=2)
    want = run_module(task.mod, target, inputs, task.outputs[-1])
    got = run_module(tvm.IRModule({"main": group_split(task.func)}), target, inputs,
                     task.outputs[-1])
    np.testing.assert_array_equal(got, want)
