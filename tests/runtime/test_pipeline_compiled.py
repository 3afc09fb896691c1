"""The torch.compile peer of pipeline plans: each stage's activation_memory_budget
fraction chosen by measurement, and a compiled stage's saved tensors counted as the
stage meter counts eager ones. In one process (the run itself: test_pipeline_run.py)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

from autosched.errors import UserError
from autosched.runtime.compiled_plans import forget_compiled_variants
from autosched.runtime.meter import SavedTensorMeter, model_state, storage_key
from autosched.runtime.pipeline import choose_fraction, run_pipeline, stage_compile_fractions
from autosched.runtime.pipeline.launch import check_fractions
from autosched.runtime.pipeline.worker import compile_layers


def linear_bytes(f):
    """A fake stage: 1000 B at fraction 0, 10000 B at 1, linear between."""
    return 1000 + 9000 * f


def test_the_largest_fitting_fraction_is_found_by_bisection():
    # 5000 B fit up to 4/9 = 0.444; on the 1/32 grid the largest below is 14/32
    fraction, nbytes, tried = choose_fraction(linear_bytes, 5000, steps=5)
    assert (fraction, nbytes) == (0.4375, 4937)
    assert [f for f, _ in tried] == [1.0, 0.0, 0.5, 0.25, 0.375, 0.4375, 0.46875]
    assert dict(tried)[0.46875] == 5218          # over: the bisection stayed below it


def test_fraction_one_when_everything_fits_and_none_when_nothing_does():
    assert choose_fraction(linear_bytes, 10000) == (1.0, 10000, ((1.0, 10000),))
    assert choose_fraction(linear_bytes, 999) == (None, 1000, ((1.0, 10000), (0.0, 1000)))


def test_a_fraction_that_does_not_fit_is_never_returned_where_bytes_are_not_monotone():
    # the partitioner may save less at a higher fraction: 0.25 over, 0.375 within; the
    # bisection answers a fraction it measured within, not the largest that would fit
    measured = {1.0: 900, 0.0: 100, 0.5: 700, 0.25: 550, 0.375: 450, 0.125: 200}
    fraction, nbytes, tried = choose_fraction(measured.__getitem__, 500, steps=3)
    assert (fraction, nbytes) == (0.125, 200)
    assert [f for f, _ in tried] == [1.0, 0.0, 0.5, 0.25, 0.125]


@pytest.mark.parametrize("fractions", [[0.5], [0.5, 1.5], [0.5, True]])
def test_compile_budgets_that_are_not_one_fraction_per_stage_are_one_line(fractions):
    with pytest.raises(UserError) as e:
        check_fractions(fractions, 2)
    assert str(e.value) == (f"compile budgets {fractions} must be 2 fractions in [0, 1], "
                            "one per stage")


def test_the_runner_refuses_bad_compile_budgets_before_any_process(tmp_path):
    doc = {"format": "autosched-pipeline-plan", "version": 1, "stages": 2,
           "micro_batches": 2, "schedule": "1F1B", "layers": ["0", "1"],
           "boundaries": [0, 1, 2], "actions": {"0": "keep", "1": "keep"}, "transfers": []}
    with pytest.raises(UserError, match="must be 2 fractions"):
        run_pipeline(str(tmp_path / "absent.py"), doc, tmp_path / "w", compile_budgets=[1])
    assert not (tmp_path / "w" / "torchrun.log").exists()


@pytest.mark.parametrize("fraction, expected", [(1.0, 640), (0.0, 128)])
def test_a_compiled_layers_saved_tensors_reach_the_meter(fraction, expected):
    """Linear(16, 32) -> GELU -> Linear(32, 16) on 2 x 16 fp32: at 1 the partitioner
    saves the input (128 B), the first Linear's output and the GELU's (256 B each), as
    eager does; at 0 the input alone, the rest recomputed. The meter's bytes are those
    of the compiled backward node's saved tensors, parameters left out."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)))
    compile_layers(model, ["0"], fraction)
    x = torch.randn(2, 16, requires_grad=True)
    try:
        with SavedTensorMeter(model_state(model)) as meter:
            y = model(x)
        node = y.grad_fn
        params = {storage_key(p) for p in model.parameters()}
        held = sum(storage_key(t)[3] for t in node.saved_tensors
                   if storage_key(t) not in params)
        assert type(node).__name__ == "CompiledFunctionBackward"
        assert meter.device_bytes == held == expected
        y.sum().backward()
        assert x.grad is not None
    finally:
        forget_compiled_variants()


def test_each_stage_gets_the_largest_fraction_whose_held_micro_batches_fit(tmp_path):
    """test_pipeline_run.py's model (4 layers, 2 stages, 4 micro-batches) at 1408 B:
    stage 0 holds 2 micro-batches, 2816 B kept, 768 B at fraction 0 (its layers' inputs:
    the whole input's 512 B storage and layer 1's 128 B each); stage 1 holds one and fits
    kept (1408 B). The run there measures these peaks at these fractions."""
    run_tests = _module(Path(__file__).with_name("test_pipeline_run.py"))
    MODEL, plan = run_tests.MODEL, run_tests.plan
    path = tmp_path / "tiny.py"
    path.write_text(MODEL)
    choices = stage_compile_fractions(str(path), plan(), 1408, steps=0)
    assert [(c.fraction, c.saved_bytes, c.held_micro_batches, c.tried) for c in choices] == [
        (0.0, 768, 2, ((1.0, 2816), (0.0, 768))), (1.0, 1408, 1, ((1.0, 1408),))]


def _module(path: Path):
    """The test module at `path`, loaded by path (pytest imports tests by path too)."""
    spec = importlib.util.spec_from_file_location("pipeline_run_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
