"""tune-model -> export-model -> torch.compile(backend=autosched.model.backend(DIR)) on the
small GPT and ResNet: outputs and gradients equal eager torch, the kernels really run.

Our CPU kernels rarely beat torch at these sizes, so the decisions are steered through the
database itself: a newer torch baseline record, slower than any kernel, for most tasks
(their kernels must run) and one faster than any kernel for one task (torch must keep
it). Tolerances: fp32 kernels reduce in another order than torch, so outputs and
gradients agree to rtol 1e-4 / atol 1e-5 (about 1000 float32 ulps at these magnitudes).
"""
from __future__ import annotations

import copy
import runpy

import pytest

torch = pytest.importorskip("torch")

from support.model_files import write_model_file

pytestmark = pytest.mark.slow
TOL = {"rtol": 1e-4, "atol": 1e-5}


def _force(db_url, path, train, keep_torch_for: str):
    """Record newer torch baselines: 1 s (every kernel wins) for every task and every
    call of several of them (joint_calls.py), except 1 ns (torch wins) for the first
    task of workload `keep_torch_for`; returns its key."""
    from autosched.db import open_database
    from autosched.model.baseline import (baseline_threads, joint_outputs,
                                          record_baseline)
    from autosched.model.extract import extract, model_tasks
    from autosched.model.joint_calls import sibling_groups
    from autosched.model.modelfile import load_model_file
    from autosched.target import resolve_target
    from autosched.versions import current_versions
    from search_space import SPACE_VERSION

    found = extract(load_model_file(str(path)), train)
    target, versions = resolve_target("llvm"), current_versions(SPACE_VERSION)
    kept = None
    with open_database(db_url) as db:
        for op, task in zip(found.ops, model_tasks(found)):
            slow = op.workload != keep_torch_for or kept is not None
            if not slow:
                kept = op.key
            record_baseline(db, task, target, versions, [1.0 if slow else 1e-9],
                            baseline_threads(target))
        tasks = model_tasks(found)
        for group in sibling_groups(found):
            first, outputs = joint_outputs([tasks[i] for i in group])
            record_baseline(db, first, target, versions, [1.0], baseline_threads(target),
                            outputs=outputs)
    return kept


# The first tasks of the training step get the budget (one trial each, in graph order):
# for the GPT they include backward matmuls and the three gradients of a layer norm; for
# the ResNet every task, the convolutions' input, weight and bias gradients included.
TRIALS = {"gpt": 14, "resnet": 10}
# one stage of the small ResNet: its 10 training tasks (3 convolutions, the classifier,
# their gradients) in few trials; test_extract covers the strided stage
MODEL = {"gpt": {}, "resnet": {"stages": 1}}
# the workload of the one task whose baseline says torch is faster, per (model, train)
KEEP = {("gpt", False): "aten_softmax", ("gpt", True): "aten_mm_tn",
        ("resnet", False): "aten_conv2d_nhwc", ("resnet", True): "aten_mm_tn"}


@pytest.fixture(scope="module", params=["gpt", "resnet"])
def exported(request, tmp_path_factory):
    """(name, model file, {train: (library dir, the op key torch keeps)}): the model tuned
    for training (whose tasks are nearly all of inference's too), exported both ways."""
    from conftest import run_cli

    from autosched.model.extract import extract
    from autosched.model.joint_calls import sibling_groups

    name = request.param
    work = tmp_path_factory.mktemp(name)
    path = write_model_file(work, name, **MODEL[name])
    db = f"sqlite:///{work}/db.sqlite"
    done = run_cli("tune-model", str(path), "--train", "--trials", str(TRIALS[name]),
                   "--db", db, "--work-dir", str(work / "logs"), "--min-repeat-ms", "1")
    assert done.returncode == 0, done.stderr
    tuned = done.stdout
    trained = extract(_load(path), True)   # each task's baseline, and each call's
    assert f"torch baselines measured: {len(trained.ops) + len(sibling_groups(trained))} " \
        in done.stdout
    libs = {}
    for train in (False, True):
        kept = _force(db, path, train, KEEP[name, train])
        out = work / ("train_lib" if train else "infer_lib")
        done = run_cli("export-model", str(path), *(["--train"] if train else []),
                       "--db", db, "-o", str(out), "--decide-on", "records",
                       "--step-check", "off")
        assert done.returncode == 0, done.stderr
        libs[train] = (out, kept)
    libs["db"], libs["tune_out"] = db, tuned
    return name, path, libs


def _load(path):
    from autosched.model.modelfile import load_model_file

    return load_model_file(str(path))


def _compiled(model, library, compiler="inductor"):
    import autosched.model

    torch._dynamo.reset()
    backend = autosched.model.backend(library, compiler)
    return torch.compile(model, backend=backend, dynamic=False), backend


def _chosen(backend, chosen):
    return [d for d in backend.decisions if d.chosen == chosen]


@pytest.mark.parametrize("compiler", ["inductor", "eager"])
def test_inference_equals_eager_and_runs_kernels(exported, compiler):
    name, path, libs = exported
    library, kept = libs[False]
    spec = _load(path)
    eager = spec.model.eval()
    compiled, backend = _compiled(copy.deepcopy(eager), library, compiler)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*spec.inputs), eager(*spec.inputs), **TOL)
        with torch.profiler.profile() as prof:
            compiled(*spec.inputs)
    if name == "resnet" and compiler == "eager":
        # tuned for inductor, which runs the net channels_last: the library's convolutions
        # are NHWC, and the eager compiler's NCHW graph calls none of them
        convs = [d for d in backend.decisions if d.op == "aten.convolution"]
        assert convs and all(d.workload.startswith("aten_conv2d") and "nhwc" not in
                             d.workload and d.chosen == "torch" and
                             d.reason == "shape not in the library" for d in convs), convs
        return
    assert _chosen(backend, "autosched"), backend.decisions
    ran = {e.name for e in prof.events() if e.name.startswith("autosched::")}
    assert ran == {f"autosched::{d.workload}" for d in _chosen(backend, "autosched")}
    assert {d.graph for d in backend.decisions} == {"inference"}
    # each matmul is computed once: torch runs exactly those left to it, none that a
    # kernel replaced (a kernel reading an earlier kernel's output reads that output)
    matmuls = ("aten.mm", "aten.addmm", "aten.bmm")
    assert sum(e.name.replace("::", ".") in matmuls for e in prof.events()) == sum(
        d.op in matmuls for d in _chosen(backend, "torch"))
    # the task whose torch baseline is faster than its kernel stays torch's
    kept_rows = [d for d in backend.decisions if d.workload == kept[0]
                 and d.reason.startswith("torch recorded faster")]
    assert kept_rows
    # a task that got no trial has no kernel: torch
    if spec.path.endswith("small_gpt.py"):
        assert any(d.reason == "no kernel recorded" for d in backend.decisions)
    # operators without a workload run in torch and say so
    assert any(d.reason == "no autosched workload" for d in backend.decisions)


def test_training_step_gradients_equal_eager_through_backward_kernels(exported):
    from autosched.model.training_step import training_step

    name, path, libs = exported
    library, _ = libs[True]
    spec = _load(path)
    eager = spec.model.train()
    model = copy.deepcopy(eager)
    compiled, backend = _compiled(model, library)
    loss = training_step(compiled, spec.inputs, spec.loss_fn)
    torch.testing.assert_close(loss, training_step(eager, spec.inputs, spec.loss_fn), **TOL)
    for (n, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=f"gradient of {n}", **TOL)
    backward = [d for d in _chosen(backend, "autosched") if d.graph == "backward"]
    assert backward, "no backward operator ran on an autosched kernel"
    if name == "gpt":
        assert {d.workload for d in backward} >= {
            "aten_mm", "aten_bmm", "aten_layer_norm_grad_input",
            "aten_layer_norm_grad_gamma", "aten_layer_norm_grad_beta"}
    else:  # the convolutions' gradients: input, weight and (the stem's) bias
        assert {d.workload for d in backward} >= {"aten_conv2d_nhwc_grad_input",
                                                  "aten_conv2d_nhwc_grad_weight",
                                                  "aten_conv2d_nhwc_grad_bias"}


def test_untuned_batch_size_falls_back_to_torch(exported):
    _, path, libs = exported
    library, _ = libs[False]
    spec = _load(path)
    other = runpy.run_path(str(path))["make_inputs"](batch=3)
    eager = spec.model.eval()
    compiled, backend = _compiled(copy.deepcopy(eager), library)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*other), eager(*other), **TOL)
    matched = [d for d in backend.decisions if d.workload]
    assert matched and all(d.chosen == "torch" for d in matched)
    assert {d.reason for d in matched} == {"shape not in the library"}


def _task(row):
    """(workload, shape parameters) of a decision or a choice (their orders differ)."""
    return row.workload, frozenset(row.shape.split(","))


def test_the_backend_obeys_the_exported_decisions(exported, tmp_path):
    """The kernels run where model_ops.json chose them, and only there: a kernel the
    file holds back stays torch's with the file's reason; without the file nothing runs."""
    import dataclasses
    import shutil

    from autosched.model.choice import read_choices, write_choices

    _, path, libs = exported
    library = tmp_path / "lib"
    shutil.copytree(libs[False][0], library)
    choices = read_choices(library)
    held = next(c for c in choices if c.chosen == "autosched")
    choices = [dataclasses.replace(c, excluded="held back by hand") if c is held else c
               for c in choices]
    write_choices(str(library), str(path), False, choices)
    spec = _load(path)
    compiled, backend = _compiled(copy.deepcopy(spec.model.eval()), library)
    with torch.no_grad():
        compiled(*spec.inputs)
    rows = [d for d in backend.decisions if _task(d) == _task(held)]
    assert rows and {(d.chosen, d.reason) for d in rows} == {("torch", "held back by hand")}
    won = {_task(c) for c in choices if c.chosen == "autosched"}
    assert {_task(d) for d in _chosen(backend, "autosched")} == won
    (library / "model_ops.json").unlink()
    compiled, bare = _compiled(copy.deepcopy(spec.model.eval()), library)
    with torch.no_grad():
        compiled(*spec.inputs)
    matched = [d for d in bare.decisions if d.workload]
    assert matched and not _chosen(bare, "autosched")


def test_time_all_times_every_kernel_beside_torch_and_the_call_decides(exported, tmp_path):
    """`export-model --time-all`: the kernel of every task with a baseline is called
    beside torch's operator (also the one whose torch baseline says torch is faster; the
    kernels of a call's gradients beside torch's one call computing them all),
    but a second task of a workload whose input shapes a timed task already takes."""
    from conftest import run_cli

    from autosched.model.choice import read_choices
    from autosched.model.extract import extract, model_tasks

    _, path, libs = exported
    out = tmp_path / "all"
    done = run_cli("export-model", str(path), "--train", "--db", libs["db"], "-o", str(out),
                   "--time-all", "--step-check", "off")
    assert done.returncode == 0, done.stderr
    model_ops = extract(_load(path), True)
    tasks = model_tasks(model_ops)
    choices = read_choices(out)
    assert [c.task_key for c in choices] == [t.key for t in tasks]
    both = [(t, c) for t, c in zip(tasks, choices)
            if c.kernel_s is not None and c.torch_s is not None]
    distinct = {(t.workload, tuple((s.shape, s.dtype) for s in t.inputs)) for t, _ in both}
    timed = [c for _, c in both if c.call_s is not None]
    assert len(timed) == len(distinct) > 0
    kept = next(c for c in choices if c.workload == KEEP[_name(path), True])
    assert kept.call_s is not None  # its record lost to torch's baseline: timed all the same
    # the gradients of one aten call (a layer norm's, a convolution's) against torch's
    # one call computing them all, decided together; every other kernel on its own
    by_key = {op.key: c for op, c in zip(model_ops.ops, choices)}
    joint = [(op, c) for op, c in zip(model_ops.ops, choices) if c.joint]
    assert joint
    for op, c in joint:
        mates = [c] + [by_key[k] for k in op.siblings]
        assert all(m.joint_torch_call_s == c.joint_torch_call_s for m in mates)
        assert c.joint_call_s == pytest.approx(sum(m.call_s for m in mates), rel=1e-12)
        assert c.torch_call_s is None
        assert c.decided_by == "side by side, with the other outputs of its call"
        assert c.chosen == ("autosched" if c.joint_call_s < c.joint_torch_call_s
                            and not c.excluded else "torch")
    for c in timed:
        if not c.joint:
            assert c.torch_call_s is not None and c.decided_by == "side by side"
            assert c.chosen == ("autosched" if c.call_s < c.torch_call_s and not c.excluded
                                else "torch")


def test_the_records_decide_the_kernels_of_a_call_together(exported):
    """tune-model timed torch's one call of every set of gradients as a record of its
    own, and its table compares the call with the kernels' records summed; export
    `--decide-on records` times the kernels together and compares their calls' sum with
    that record (1 s here, `_force`), for every task of the call alike."""
    from autosched.model.choice import read_choices
    from autosched.model.extract import extract
    from autosched.model.joint_calls import sibling_groups

    _, path, libs = exported
    model_ops = extract(_load(path), True)
    choices = read_choices(libs[True][0])
    checked = 0
    for group in sibling_groups(model_ops):
        members = [choices[i] for i in group]
        if any(m.kernel_s is None for m in members):  # no kernel built: no pair
            assert not any(m.joint for m in members)
            continue
        checked += 1
        for m in members:
            assert m.joint_torch_s == 1.0 and m.joint_torch_call_s is None
            assert m.joint_kernel_s == pytest.approx(sum(x.kernel_s for x in members))
            assert m.joint_call_s == pytest.approx(sum(x.call_s for x in members))
            assert m.decided_by == \
                "call against baseline record, with the other outputs of its call"
            assert m.chosen == "autosched" or m.excluded
    assert checked
    assert "(call)" in libs["tune_out"]


def _name(path) -> str:
    return path.stem.removeprefix("small_")


def test_choices_file_report_and_explain_name_every_task(exported, capsys):
    import autosched.model
    from autosched.cli.main import main
    from autosched.model.choice import read_choices

    _, path, libs = exported
    library, kept = libs[True]
    choices = read_choices(library)
    chosen = {c.chosen for c in choices}
    assert chosen == {"autosched", "torch"}
    assert all(c.torch_s is not None for c in choices)
    kept_choice = next(c for c in choices if (c.workload, tuple(sorted(c.params.items())))
                       == kept)
    assert kept_choice.chosen == "torch" and kept_choice.torch_s == pytest.approx(1e-9)
    assert main(["report", "--db", libs["db"], "--no-plots", "--model-library",
                 str(library)]) == 0
    out = capsys.readouterr().out
    won = sum(c.chosen == "autosched" for c in choices)
    assert f"{won} of {len(choices)} operators run autosched kernels" in out
    assert "torch:aten_" in out  # the baseline records, beside the kernels' records
    _, backend = _compiled(_load(path).model, library)
    assert autosched.model.explain(backend).count("\n") == 1  # nothing compiled: header


def test_compiled_plans_on_kernels_keep_the_budget_and_the_gradients(exported):
    """Plans compiled on autosched's backend (compile_planned(..., backend=...)): AOTAutograd
    splits the graph with the min-cut partitioner, so its memory budget applies (at 0 it
    saves less than at 1) and so does a plan's recompute; gradients equal eager's and the
    backward runs kernels."""
    import autosched.model
    from autosched.runtime.compiled_plans import compile_planned
    from autosched.runtime.layers import find_layers
    from autosched.runtime.meter import SavedTensorMeter, model_state
    from autosched.model.training_step import compute_loss, training_step

    _, path, libs = exported
    library, _ = libs[True]
    spec = _load(path)
    eager = spec.model.train()
    ref = copy.deepcopy(eager)
    training_step(ref, spec.inputs, spec.loss_fn)
    n = len(find_layers(eager, "blocks"))      # both models keep their blocks there
    saved = {}
    for actions, budget in ((["keep"] * n, 1.0), (["keep"] * n, 0.0), (["recompute"] * n, 1.0)):
        torch._dynamo.reset()
        model = copy.deepcopy(eager)
        backend = autosched.model.backend(library, "inductor")
        run = compile_planned(model, actions, memory_budget=budget, backend=backend,
                              layers="blocks")
        training_step(run, spec.inputs, spec.loss_fn)           # compiles
        model.zero_grad(set_to_none=True)
        with SavedTensorMeter(model_state(model)) as meter:
            loss = compute_loss(run, spec.inputs, spec.loss_fn)
        loss.backward()
        meter.release()
        saved[actions[0], budget] = meter.device_bytes
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=f"gradient of {name}", **TOL)
        assert any(d.graph == "backward" for d in _chosen(backend, "autosched"))
    assert saved["keep", 0.0] < saved["keep", 1.0]
    assert saved["recompute", 1.0] < saved["keep", 1.0]
